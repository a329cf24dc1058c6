#!/bin/bash
# Written by kubetrain for the Flux ML policy. Runs in the flux-installer init container (a Flux view image):
# writes the hostlist and the broker configuration, then copies the Flux view and the spack software tree into
# the shared volume mounted at /mnt/flux, where the application container picks them up.
fluxroot={{FLUX_ROOT}}
mainHost={{MAIN_HOST}}
hosts="{{HOSTS}}"
installRoot=/mnt/flux/config
viewroot=/mnt/flux

echo "Preparing Flux on $(hostname) (lead broker ${mainHost}, view ${fluxroot})"
export fluxroot
export PATH=/opt/view/bin:$PATH
mkdir -p "${fluxroot}/bin"

mkdir -p "${installRoot}/etc/flux/system/cron.d" "${installRoot}/var/lib/flux" "${installRoot}/etc/flux/config"
mkdir -p "${installRoot}/run/flux" "${installRoot}/etc/curve"
echo "${hosts}" > "${installRoot}/etc/flux/system/hostlist"

# Overwrite rather than append, so that a restarted init container leaves a valid file.
cat > "${installRoot}/etc/flux/config/broker.toml" <<'BROKER'
{{BROKER_CONFIG}}
BROKER
echo "Broker configuration:"
cat "${installRoot}/etc/flux/config/broker.toml"

# /opt/view links into the one directory under /opt/views/._view; the view links into /opt/software, which the
# application container restores from the copy made here.
mkdir -p "${viewroot}/view"
view="/opt/views/._view/$(ls /opt/views/._view/)"
echo "Copying the Flux view from ${view} to ${viewroot}/view"
cp -R "${view}"/* "${viewroot}/view"
cp -R /opt/software "${viewroot}/"

touch "${viewroot}/flux-operator-done.txt"
echo "Flux view ready."
