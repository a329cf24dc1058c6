# Certificates and kubeconfigs of the e2e cluster, made with openssl into $E2E_STATE/pki.
# shellcheck shell=bash

PKI="$E2E_STATE/pki"

# sign NAME SUBJECT [SAN]: an EC P-256 key and a certificate for it signed by the harness CA.
sign() {
    local name=$1 subject=$2 san=${3:-}
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    local ext="$PKI/$name.ext"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [[ -n $san ]]; then
            echo "extendedKeyUsage=serverAuth,clientAuth"
            echo "subjectAltName=$san"
        else
            echo "extendedKeyUsage=clientAuth"
        fi
    } >"$ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 30 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$ext"
}

make_pki() {
    [[ -f "$PKI/done" ]] && return
    rm -rf "$PKI" && mkdir -p "$PKI" && chmod 700 "$PKI"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=kubetrain-e2e-ca" -days 30 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$PKI/ca.crt" 2>/dev/null
    sign apiserver "/CN=kube-apiserver" \
        "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    sign admin "/O=system:masters/CN=kubetrain-e2e-admin"
    # One serving certificate for every out-of-cluster webhook server (all on 127.0.0.1), in the layout of
    # a kubernetes.io/tls Secret that controller-runtime and kubetrain-operator both read.
    sign webhook "/CN=webhooks.e2e.local" "IP:127.0.0.1,DNS:localhost"
    mkdir -p "$PKI/webhook-certs"
    cp "$PKI/webhook.crt" "$PKI/webhook-certs/tls.crt"
    cp "$PKI/webhook.key" "$PKI/webhook-certs/tls.key"
    # The ServiceAccount token signing pair.
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    touch "$PKI/done"
}

# write_kubeconfig FILE USER-YAML: a kubeconfig for the e2e API server with the given user entry.
write_kubeconfig() {
    local file=$1 user=$2
    cat >"$file" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: kubetrain-e2e
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: user
  user:
$user
contexts:
- name: kubetrain-e2e
  context: {cluster: kubetrain-e2e, user: user, namespace: default}
current-context: kubetrain-e2e
YAML
    chmod 600 "$file"
}

admin_kubeconfig() {
    write_kubeconfig "$ADMIN_KUBECONFIG" "    client-certificate: $PKI/admin.crt
    client-key: $PKI/admin.key"
}
