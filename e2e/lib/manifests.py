"""Rewrites a controller's in-cluster manifests for the out-of-cluster e2e harness.

Every controller here (ours, JobSet's, Kueue's, upstream Trainer's) runs as a local process, so the API
server reaches its webhooks at https://127.0.0.1:<port>/<path> instead of through a Service:

  manifests.py webhooks --url https://127.0.0.1:19444 --ca ca.crt --prefix jobset- FILE...
      MutatingWebhookConfiguration / ValidatingWebhookConfiguration documents of FILE, with each
      clientConfig.service replaced by a url on the same path, the CA bundle set, cert-manager
      annotations dropped and metadata.name prefixed (JobSet and Kueue both call theirs
      "mutating-webhook-configuration") or renamed (--rename OLD=NEW, as a kustomize patch would).
  manifests.py crds [--conversion-url URL --ca ca.crt --convert NAME,...] FILE...
      CustomResourceDefinition documents of FILE; the named CRDs get a conversion webhook at URL/convert.

Output: a YAML stream on stdout, for `kubectl apply --server-side -f -`.
"""

import argparse
import base64
import sys

import yaml


def load(files):
    for path in files:
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    yield doc


def ca_bundle(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def webhooks(args):
    out = []
    for doc in load(args.files):
        if doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        meta = doc.setdefault("metadata", {})
        renames = dict(r.split("=", 1) for r in args.rename or [])
        meta["name"] = renames.get(meta["name"], args.prefix + meta["name"])
        meta.pop("namespace", None)
        annotations = meta.get("annotations") or {}
        for key in [k for k in annotations if k.startswith("cert-manager.io/")]:
            del annotations[key]
        for hook in doc.get("webhooks") or []:
            cc = hook.setdefault("clientConfig", {})
            service = cc.pop("service", None) or {}
            cc["url"] = args.url.rstrip("/") + service.get("path", "/")
            cc["caBundle"] = ca_bundle(args.ca)
        out.append(doc)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


def crds(args):
    convert = set(filter(None, (args.convert or "").split(",")))
    out = []
    for doc in load(args.files):
        if doc.get("kind") != "CustomResourceDefinition":
            continue
        name = doc["metadata"]["name"]
        if name in convert:
            doc["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "url": args.conversion_url.rstrip("/") + "/convert",
                        "caBundle": ca_bundle(args.ca),
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
            convert.discard(name)
        out.append(doc)
    if convert:
        sys.exit(f"manifests.py: no CRD named {', '.join(sorted(convert))} in {args.files}")
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("webhooks")
    w.add_argument("--url", required=True)
    w.add_argument("--ca", required=True)
    w.add_argument("--prefix", default="")
    w.add_argument("--rename", action="append", metavar="OLD=NEW", help="name a configuration NEW instead")
    w.add_argument("files", nargs="+")
    w.set_defaults(run=webhooks)
    c = sub.add_parser("crds")
    c.add_argument("--conversion-url")
    c.add_argument("--ca")
    c.add_argument("--convert")
    c.add_argument("files", nargs="+")
    c.set_defaults(run=crds)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
