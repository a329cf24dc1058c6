"""Splits what upstream's Helm chart (or kustomize overlay) rendered into what the out-of-cluster e2e harness
applies and runs.

`e2e/cluster.sh up --install upstream-chart` renders upstream Kubeflow Trainer's own chart
(charts/kubeflow-trainer from the kubeflow/trainer Go module) with kubetrain's image, `--install
upstream-kustomize` its kustomize overlay manifests/overlays/manager the same way, then:

  upstream_chart.py split --rendered FILE --out DIR --url https://127.0.0.1:PORT --dockerfile FILE --image IMAGE

writes into DIR

  crds.yaml       the CustomResourceDefinitions (applied first);
  objects.yaml    every other object as rendered (ServiceAccount, RBAC, the Configuration ConfigMap, the empty
                  certificate Secret, the Service, the runtimes' ConfigMap ...), except the Deployment (kwok has
                  no kubelet: the harness runs its container as a host process) and Helm hooks (the runtimes
                  installer Job: it would `kubectl apply` runtimes.yaml, which the harness does itself);
  webhooks.yaml   the two webhook configurations as rendered, except that each clientConfig.service becomes a
                  url on the same path (what the Service would route to) and no caBundle is set: the operator's
                  built-in certificate management must inject it;
  runtimes.yaml   the runtimes the installer Job would apply (empty when the chart enables none);
  manager/        the Deployment's container: `command` (the image's ENTRYPOINT when it sets none) and `args`
                  (one per line, each container path of a ConfigMap mount replaced by the file written under
                  manager/mounts/), `service-account`, `namespace`, `secret` (the certificate Secret the pod
                  mounts), `image` and `metrics-scheme` (`https` when its Configuration file serves metrics
                  securely).

  upstream_chart.py overlay --overlay DIR --out DIR --image IMAGE

writes a kustomization that is upstream's overlay with JobSet left out and IMAGE in place of upstream's image;

  upstream_chart.py repoint --url URL FILE

prints FILE's webhook configurations calling URL (another replica's port).

`split` fails (exit 1, one line per problem) when the Deployment's image is not IMAGE or when its command (or,
without one, the image's ENTRYPOINT) is a path the kubetrain image (DOCKERFILE) does not provide.
"""

import argparse
import json
import os
import sys

import yaml

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def image_paths(dockerfile):
    """The final stage of DOCKERFILE: the paths it copies files to (`COPY [--from=...] SRC... DEST`) and its
    ENTRYPOINT (exec form)."""
    paths, entrypoint = [], []
    with open(dockerfile, encoding="utf-8") as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0].upper() == "FROM":
                paths, entrypoint = [], []  # only the last stage is the image
            elif words[0].upper() == "COPY":
                args = [w for w in words[1:] if not w.startswith("--")]
                if len(args) >= 2:
                    paths.append(args[-1])
            elif words[0].upper() == "ENTRYPOINT":
                entrypoint = json.loads(line.split(None, 1)[1])
    return paths, entrypoint


def write(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


def repoint(doc, url):
    for hook in doc.get("webhooks") or []:
        cc = hook.setdefault("clientConfig", {})
        service = cc.pop("service", None)
        if service:
            path = service.get("path", "/")
        else:  # already a url (re-pointed before): keep its path
            path = "/" + cc.get("url", "").split("://", 1)[-1].partition("/")[2]
        cc.pop("caBundle", None)
        cc["url"] = url.rstrip("/") + path
    return doc


def metrics_scheme(args):
    """`https` when the Configuration file of `--config` serves metrics securely (upstream's default), else `http`."""
    path = None
    for i, arg in enumerate(args):
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(args):
            path = args[i + 1]
    if path is None:
        return "http"  # kubetrain-operator without --config: plain HTTP metrics
    with open(path, encoding="utf-8") as f:
        config = yaml.safe_load(f) or {}
    return "https" if (config.get("metrics") or {}).get("secureServing", True) else "http"


def manager(deployment, configmaps, out, image, dockerfile):
    """Writes out/manager/*: how the Deployment's container runs, with its ConfigMap mounts as host files."""
    problems = []
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    if container.get("image") != image:
        problems.append(
            f"Deployment {deployment['metadata']['name']}: image {container.get('image')!r}, expected {image!r}"
        )
    provided, entrypoint = image_paths(dockerfile)
    command = container.get("command") or entrypoint
    if not command or command[0] not in provided:
        problems.append(
            f"Deployment {deployment['metadata']['name']}: command {command[:1]} is not in the kubetrain image "
            f"({dockerfile} copies to {', '.join(provided) or 'nothing'})"
        )
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = {}  # container path -> host path
    secret = ""
    os.makedirs(os.path.join(out, "manager", "mounts"), exist_ok=True)
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"], {})
        if "secret" in volume:
            secret = volume["secret"]["secretName"]
        if "configMap" not in volume:
            continue
        name = volume["configMap"]["name"]
        data = (configmaps.get(name) or {}).get("data") or {}
        host = os.path.join(out, "manager", "mounts", mount["name"])
        if mount.get("subPath"):
            if mount["subPath"] not in data:
                problems.append(f"ConfigMap {name}: no key {mount['subPath']!r} (mounted at {mount['mountPath']})")
                continue
            host += "-" + mount["subPath"]
            with open(host, "w", encoding="utf-8") as f:
                f.write(data[mount["subPath"]])
        else:
            os.makedirs(host, exist_ok=True)
            for key, value in data.items():
                with open(os.path.join(host, key), "w", encoding="utf-8") as f:
                    f.write(value)
        mounts[mount["mountPath"]] = host

    def translate(arg):
        for path, host in sorted(mounts.items(), key=lambda m: -len(m[0])):
            if path in arg:
                return arg.replace(path, host)
        return arg

    args = [translate(a) for a in container.get("args") or []]
    files = {
        "command": "\n".join(command),
        "args": "\n".join(args),
        "metrics-scheme": metrics_scheme(args),
        "service-account": pod.get("serviceAccountName", "default"),
        "namespace": deployment["metadata"].get("namespace", ""),
        "secret": secret,
        "image": container.get("image", ""),
    }
    for name, value in files.items():
        with open(os.path.join(out, "manager", name), "w", encoding="utf-8") as f:
            f.write(value + "\n" if value else "")
    with open(os.path.join(out, "manager", "mounts.json"), "w", encoding="utf-8") as f:
        json.dump(mounts, f, indent=2)
    return problems


def split(args):
    with open(args.rendered, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    crds, objects, webhooks, deployments, configmaps, runtimes = [], [], [], [], {}, []
    for doc in docs:
        kind = doc.get("kind")
        annotations = doc.get("metadata", {}).get("annotations") or {}
        if kind == "ConfigMap":
            configmaps[doc["metadata"]["name"]] = doc
            data = doc.get("data") or {}
            if "runtimes.yaml" in data:
                runtimes = [d for d in yaml.safe_load_all(data["runtimes.yaml"]) if d]
        if "helm.sh/hook" in annotations:
            continue
        if kind == "CustomResourceDefinition":
            crds.append(doc)
        elif kind in WEBHOOK_KINDS:
            webhooks.append(repoint(doc, args.url))
        elif kind == "Deployment":
            deployments.append(doc)
        else:
            objects.append(doc)
    problems = []
    if len(deployments) != 1:
        problems.append(f"{args.rendered}: {len(deployments)} Deployments rendered, expected the manager's one")
    if sorted(d["kind"] for d in webhooks) != sorted(WEBHOOK_KINDS):
        problems.append(f"{args.rendered}: expected one mutating and one validating webhook configuration")
    os.makedirs(args.out, exist_ok=True)
    write(os.path.join(args.out, "crds.yaml"), crds)
    write(os.path.join(args.out, "objects.yaml"), objects)
    write(os.path.join(args.out, "webhooks.yaml"), webhooks)
    write(os.path.join(args.out, "runtimes.yaml"), runtimes)
    if len(deployments) == 1:
        problems += manager(deployments[0], configmaps, args.out, args.image, args.dockerfile)
    for problem in problems:
        print(f"upstream_chart.py: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    container = deployments[0]["spec"]["template"]["spec"]["containers"][0]
    print(f"{len(crds)} CRDs, {len(objects)} objects, {len(webhooks)} webhook configurations, "
          f"{len(runtimes)} runtimes; manager: {' '.join(container.get('command') or ['<entrypoint>'])} "
          f"{' '.join(container.get('args') or [])}")


def overlay(args):
    """A kustomization in OUT that is upstream's overlay (OVERLAY) with JobSet left out (upstream's own comment:
    "Comment this line if JobSet is installed") and kubetrain's image; paths relative, as kustomize wants."""
    with open(os.path.join(args.overlay, "kustomization.yaml"), encoding="utf-8") as f:
        k = yaml.safe_load(f)
    os.makedirs(args.out, exist_ok=True)
    resources = []
    for resource in k.get("resources") or []:
        if "third-party/jobset" in resource:
            continue
        path = os.path.normpath(os.path.join(args.overlay, resource))
        if os.path.isfile(path) and not resource.startswith(".."):
            with open(path, encoding="utf-8") as src:
                text = src.read()
            with open(os.path.join(args.out, resource), "w", encoding="utf-8") as dst:
                dst.write(text)
            resources.append(resource)
        else:
            resources.append(os.path.relpath(path, args.out))
    k["resources"] = resources
    name, _, tag = args.image.rpartition(":")
    images = [i for i in k.get("images") or [] if i.get("name") != args.upstream_image]
    k["images"] = images + [{"name": args.upstream_image, "newName": name, "newTag": tag}]
    with open(os.path.join(args.out, "kustomization.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(k, f, sort_keys=False)


def repoint_cmd(args):
    """Re-points the webhook configurations of FILE at URL (e.g. another replica's port)."""
    with open(args.file, encoding="utf-8") as f:
        docs = [repoint(d, args.url) for d in yaml.safe_load_all(f) if d]
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split")
    s.add_argument("--rendered", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--url", required=True)
    s.add_argument("--image", required=True)
    s.add_argument("--dockerfile", required=True)
    s.set_defaults(run=split)
    o = sub.add_parser("overlay")
    o.add_argument("--overlay", required=True)
    o.add_argument("--out", required=True)
    o.add_argument("--image", required=True)
    o.add_argument("--upstream-image", default="ghcr.io/kubeflow/trainer/trainer-controller-manager")
    o.set_defaults(run=overlay)
    r = sub.add_parser("repoint")
    r.add_argument("--url", required=True)
    r.add_argument("file")
    r.set_defaults(run=repoint_cmd)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
