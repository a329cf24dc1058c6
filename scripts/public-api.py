#!/usr/bin/env python3
"""Pins each library crate's public API to a listing committed under docs/public-api/.

The listing is read from the HTML that `cargo doc --workspace --no-deps` already writes (CI builds it in its
"docs" step), so pinning costs no extra compile and needs no nightly toolchain: every item rustdoc lists in a
crate's `all.html`, and for each struct, enum, union and trait its public fields, variants, inherent methods,
required and provided trait methods, and the traits it implements (not the auto and blanket ones). Items are
listed at the path users see them (rustdoc inlines re-exports from private modules).

    scripts/public-api.py            compare with docs/public-api/*.txt; exit 1 with a diff on any change
    scripts/public-api.py --write    regenerate the listings (commit the diff: it is the API change)
    scripts/public-api.py --count    print the number of public items per crate

Run `cargo doc --workspace --no-deps` first; the script finds the target directory through cargo.
"""

import difflib
import html
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LISTINGS = REPO / "docs" / "public-api"
# The library crates whose API is pinned (binaries, benches and the test-support crate are not APIs).
CRATES = [
    "kubetrain",
    "kubetrain_acceptance",
    "kubetrain_api",
    "kubetrain_client",
    "kubetrain_collective",
    "kubetrain_controller",
    "kubetrain_initializer",
    "kubetrain_jobset",
    "kubetrain_kueue",
    "kubetrain_merge",
    "kubetrain_migrate",
    "kubetrain_nccl_sys",
    "kubetrain_optimize",
    "kubetrain_quantity",
    "kubetrain_tenancy",
    "kubetrain_yaml",
]
# all.html sections: heading id -> the kind word used in the listing.
KINDS = {
    "structs": "struct",
    "enums": "enum",
    "unions": "union",
    "traits": "trait",
    "functions": "fn",
    "types": "type",
    "constants": "const",
    "statics": "static",
    "macros": "macro",
    "derives": "derive",
    "attributes": "attribute",
    "trait-aliases": "trait-alias",
}
# The facade re-exports whole crates as modules; those are pinned in their own listings, not again here.
FACADE_CRATE_MODULES = {
    "api", "merge", "jobset", "yaml", "kueue", "collective", "initializer", "migrate", "tenancy", "optimize",
    "client", "controller",
}
MEMBER_IDS = re.compile(r'id="((?:method|tymethod|structfield|variant|associatedtype|associatedconstant)\.[A-Za-z0-9_]+)"')
CODE_HEADER = re.compile(r'<h3 class="code-header">(.*?)</h3>', re.S)
TAG = re.compile(r"<[^>]+>")


def target_dir() -> Path:
    out = subprocess.run([str(REPO / "scripts" / "target-dir.sh")], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def section(page: str, start_id: str, end_ids: list[str]) -> str:
    """The part of `page` from the element with id `start_id` to the first of `end_ids` after it."""
    start = page.find(f'id="{start_id}"')
    if start < 0:
        return ""
    ends = [i for i in (page.find(f'id="{e}"', start) for e in end_ids) if i >= 0]
    return page[start : min(ends) if ends else len(page)]


def members(page: str) -> list[str]:
    """Fields, variants, inherent and trait-declared methods, and implemented traits of one item page."""
    own = page[: page.find('id="trait-implementations"')] if 'id="trait-implementations"' in page else page
    own = own.split('id="synthetic-implementations"')[0].split('id="blanket-implementations"')[0]
    # Members of implementors listed on a trait page are not the trait's own.
    own = own.split('id="implementors"')[0]
    found = sorted({m.replace(".", " ", 1) for m in MEMBER_IDS.findall(own)})
    impls = section(page, "trait-implementations", ["synthetic-implementations", "blanket-implementations"])
    for header in CODE_HEADER.findall(impls):
        text = " ".join(html.unescape(TAG.sub("", header)).split())
        if text.startswith("impl"):
            found.append(text)
    return found


def listing(doc: Path, crate: str) -> list[str]:
    root = doc / crate
    page = (root / "all.html").read_text()
    lines = []
    for sid, kind in KINDS.items():
        body = section(page, sid, [f"{k}" for k in KINDS if k != sid])
        for href, name in re.findall(r'<a href="([^"]+)">([^<]+)</a>', body):
            name = html.unescape(name)
            if crate == "kubetrain" and name.split("::")[0] in FACADE_CRATE_MODULES:
                continue
            path = f"{crate}::{name}"
            lines.append(f"{kind} {path}")
            if kind in ("struct", "enum", "union", "trait"):
                lines.extend(f"{kind} {path} {m}" for m in members((root / href).read_text()))
    return sorted(set(lines))


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("", "--write", "--count"):
        print(__doc__)
        return 2
    doc = target_dir() / "doc"
    failed = False
    for crate in CRATES:
        if not (doc / crate / "all.html").exists():
            print(f"{doc / crate / 'all.html'}: missing; run `cargo doc --workspace --no-deps` first")
            return 2
        current = listing(doc, crate)
        file = LISTINGS / f"{crate}.txt"
        if mode == "--count":
            top = sum(1 for line in current if len(line.split(" ")) == 2)
            print(f"{crate}: {top} items, {len(current)} lines with members")
        elif mode == "--write":
            LISTINGS.mkdir(parents=True, exist_ok=True)
            file.write_text("".join(f"{line}\n" for line in current))
        else:
            pinned = file.read_text().splitlines() if file.exists() else []
            if pinned != current:
                failed = True
                sys.stdout.writelines(
                    f"{d}\n" for d in difflib.unified_diff(pinned, current, str(file), "cargo doc", lineterm="", n=0)
                )
    if failed:
        print("\nThe public API changed. If that is deliberate, run scripts/public-api.py --write and commit the diff.")
        return 1
    if mode == "":
        print(f"public API: {len(CRATES)} crates match docs/public-api/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
