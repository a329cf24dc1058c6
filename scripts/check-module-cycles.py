#!/usr/bin/env python3
"""No file import cycles inside a crate: every crate under crates/ and examples/ is a DAG of source files.

For each crate the script maps every file of its module trees (src/lib.rs, src/main.rs, src/bin/*.rs and the
`mod` declarations below them, `#[path]` included) to its module path, and collects the references each file
makes to the crate's own modules: `use` declarations (nested groups, `self`, renames and globs) and paths in
code that start with `crate::`, `super::`, `self::`, a child module or a name the module imports. A reference
is resolved through the crate's `use` declarations (so `crate::Error`, re-exported by lib.rs from error.rs,
points at error.rs): a reference to module `a::b` points at the file that defines `a::b`, a reference to an
item points at the file that defines the module holding it. A module's file composes its descendants, so
neither a `mod` declaration nor a reference from a file to a module below it is a dependency (lib.rs declaring
`mod local;` and re-exporting `local::LocalProcessBackend`, plugins/mod.rs listing the plugins its children
define: no edge); every other reference is one (a child using its parent's trait, a sibling, a cousin).
`--strict` counts references to descendants too (then every parent whose children use it is a cycle).

Code compiled only for tests is left out: the lexer blanks comments and string and char literals, then every
item under `#[cfg(test)]` (or `#[cfg(all(test, ...))]`) is blanked to its closing `;` or brace, so a test
module, inline or in its own file, adds no edge and no file. Macro-generated code and `cfg`s other than test
are read as written.

The file graph's strongly connected components of more than one file are the cycles.

    scripts/check-module-cycles.py                     list each crate's cycles; exit 1 if any
    scripts/check-module-cycles.py --allow FILE        crates named in FILE (one a line, # comments) are
                                                       reported but do not fail; a listed crate without
                                                       cycles fails (take it off the list)
    scripts/check-module-cycles.py --count             cycles and files in cycles per crate; exit 0
    scripts/check-module-cycles.py --strict ...        references to descendants count as edges too
    scripts/check-module-cycles.py --self-test         check the resolver on a small fixture workspace
"""

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
KEYWORD_ROOTS = {"crate", "super", "self"}
TEST_CFG = re.compile(r"#\[cfg\(\s*(?:all\(\s*)?test\b")
ITEM_DEF = re.compile(r"\b(?:fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+(" + IDENT + ")")
MOD_DECL = re.compile(r"\bmod\s+(" + IDENT + r")\s*([;{])")
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\s*\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(' + IDENT + ")")
USE_DECL = re.compile(r"\buse\s+")
CODE_PATH = re.compile(r"(?<![A-Za-z0-9_:])(" + IDENT + r")((?:\s*::\s*(?:<[^<>;{}]*>\s*::\s*)?" + IDENT + r")+)")


def blank(text):
    """The text with comments, strings and char literals replaced by spaces (offsets and newlines kept)."""
    out = list(text)
    i, n = 0, len(text)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif (m := re.match(r'(?:b|c)?r(#*)"', text[i : i + 300])) and (i == 0 or not re.match(r"\w", text[i - 1])):
            close = '"' + m.group(1)
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            wipe(i, j)
            i = j
        elif c == '"' or (c in "bc" and text.startswith('"', i + 1) and (i == 0 or not re.match(r"\w", text[i - 1]))):
            j = i + (1 if c == '"' else 2)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            if text.startswith("\\", i + 1):
                j = text.find("'", i + 2)
                j = n if j < 0 else j + 1
                wipe(i, j)
                i = j
            elif i + 2 < n and text[i + 2] == "'":
                wipe(i, i + 3)
                i += 3
            else:
                i += 1  # a lifetime
        else:
            i += 1
    return "".join(out)


def matching_brace(code, open_at):
    """The offset just past the brace that closes the one at `open_at`."""
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


def strip_tests(code):
    """`code` with every `#[cfg(test)]` item blanked."""
    out = list(code)
    pos = 0
    while m := TEST_CFG.search(code, pos):
        k = m.end()
        depth = 1
        while k < len(code) and depth:  # the rest of the attribute
            depth += {"[": 1, "]": -1}.get(code[k], 0)
            k += 1
        end = k
        while end < len(code) and code[end] not in ";{":
            end += 1
        end = matching_brace(code, end) if end < len(code) and code[end] == "{" else end + 1
        for j in range(m.start(), min(end, len(code))):
            if out[j] != "\n":
                out[j] = " "
        pos = end
    return "".join(out)


def split_use_tree(text):
    """`a::{b, c::{d as e, self}}, *` -> [(["a","b"], None), ...]: the leaves of a use tree with renames."""
    tokens = re.findall(IDENT + r"|::|\{|\}|,|\*", text)
    leaves = []

    def tree(i, prefix):
        path = list(prefix)
        while i < len(tokens):
            t = tokens[i]
            if t == "{":
                i += 1
                while i < len(tokens) and tokens[i] != "}":
                    i = tree(i, path)
                    if i < len(tokens) and tokens[i] == ",":
                        i += 1
                return i + 1
            if t in (",", "}"):
                break
            if t == "::":
                i += 1
                continue
            if t == "as" and i + 1 < len(tokens):
                leaves.append((path, tokens[i + 1]))
                return i + 2
            if t == "self" and path:
                i += 1
                continue
            path.append(t)
            i += 1
        if path:
            leaves.append((path, None))
        return i

    i = 0
    while i < len(tokens):
        i = tree(i, [])
        if i < len(tokens) and tokens[i] == ",":
            i += 1
    return leaves


class Module:
    def __init__(self, path, file, parent):
        self.path, self.file, self.parent = path, file, parent
        self.children = {}  # name -> Module
        self.imports = {}  # name -> segments (relative to this module)
        self.globs = []  # segments
        self.items = set()


class Crate:
    def __init__(self, name, src):
        self.name, self.src = name, src
        self.files = {}  # Path -> blanked code
        self.modules = []
        self.refs = []  # (Module, segments, file)

    def load(self, root):
        self.add_file(root, (), None, root.parent)

    def add_file(self, file, path, parent, child_dir):
        if file in self.files or not file.is_file():
            return
        raw = file.read_text(encoding="utf-8")
        code = strip_tests(blank(raw))
        self.files[file] = code
        paths = {m.start(2): m.group(1) for m in PATH_ATTR.finditer(raw)}
        top = Module(path, file, parent)
        self.modules.append(top)
        if parent:
            parent.children[path[-1]] = top
        spans = [(0, len(code), top)]  # inline modules: (start, end, Module), outermost first
        for m in MOD_DECL.finditer(code):
            owner = innermost(spans, m.start())
            name = m.group(1)
            if m.group(2) == "{":
                mod = Module(owner.path + (name,), file, owner)
                owner.children[name] = mod
                self.modules.append(mod)
                spans.append((m.end() - 1, matching_brace(code, m.end() - 1), mod))
                continue
            base = child_dir.joinpath(*owner.path[len(path) :])
            attr = paths.get(m.start(1))
            if attr:
                target = (file.parent / attr).resolve()
                self.add_file(target, owner.path + (name,), owner, target.parent / target.stem)
                continue
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.is_file():
                    self.add_file(cand, owner.path + (name,), owner, base / name)
                    break
        for m in ITEM_DEF.finditer(code):
            innermost(spans, m.start()).items.add(m.group(1))
        uses = []
        for m in USE_DECL.finditer(code):
            end = code.find(";", m.end())
            if end < 0:
                continue
            owner = innermost(spans, m.start())
            body = code[m.end() : end].strip()
            for segs, rename in split_use_tree(body):
                if segs[-1] == "*":
                    owner.globs.append(segs[:-1])
                    self.refs.append((owner, segs[:-1], file))
                    continue
                owner.imports[rename or segs[-1]] = segs
                self.refs.append((owner, segs, file))
            uses.append((m.start(), end))
        rest = list(code)
        for a, b in uses:
            rest[a:b] = " " * (b - a)
        rest = "".join(rest)
        for m in CODE_PATH.finditer(rest):
            segs = [m.group(1)] + re.findall(IDENT, re.sub(r"<[^<>]*>", "", m.group(2)))
            self.refs.append((innermost(spans, m.start()), segs, file))


def innermost(spans, offset):
    best = spans[0][2]
    for start, end, mod in spans:
        if start <= offset < end:
            best = mod
    return best


def resolve(crate_root, module, segs, depth=0):
    """The file a path used in `module` points at, or None for another crate's item."""
    if depth > 16 or not segs:
        return None
    first, rest = segs[0], segs[1:]
    if first == "crate":
        cur = crate_root
    elif first == "self":
        cur = module
    elif first == "super":
        cur = module
        while segs and segs[0] == "super":
            cur = cur.parent
            segs = segs[1:]
            if cur is None:
                return None
        rest = segs
    elif first in module.children:
        cur = module.children[first]
    elif first in module.imports:
        return walk_import(crate_root, module, first, rest, depth)
    else:
        return None  # another crate, a local type, a prelude name
    return walk(crate_root, cur, rest, depth)


def walk_import(crate_root, module, name, rest, depth):
    target = module.imports[name]
    if target[0] not in KEYWORD_ROOTS and target[0] not in module.children:
        # `use foo::X` names another crate unless `foo` is in scope here (2018 uniform paths).
        if target[0] not in module.imports or module.imports[target[0]] == target:
            return None
    resolved = resolve(crate_root, module, target, depth + 1)
    if resolved is None or not rest:
        return resolved
    if isinstance(resolved, Module):
        return walk(crate_root, resolved, rest, depth + 1)
    return resolved


def walk(crate_root, cur, rest, depth):
    for i, seg in enumerate(rest):
        if seg in cur.children:
            cur = cur.children[seg]
            continue
        if seg in cur.items:
            return cur.file
        if seg in cur.imports:
            return walk_import(crate_root, cur, seg, rest[i + 1 :], depth + 1)
        for glob in cur.globs:
            src = resolve(crate_root, cur, glob, depth + 1)
            if isinstance(src, Module) and (
                seg in src.children or seg in src.items or seg in src.imports
            ):
                return walk(crate_root, src, rest[i:], depth + 1)
        return cur.file
    return cur


def target_file(crate_root, module, segs):
    got = resolve(crate_root, module, segs)
    return got.file if isinstance(got, Module) else got


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def crate_cycles(cargo_toml, strict=False):
    text = cargo_toml.read_text(encoding="utf-8")
    name = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M).group(1)
    src = cargo_toml.parent / "src"
    roots = [p for p in (src / "lib.rs", src / "main.rs") if p.is_file()]
    roots += sorted((src / "bin").glob("*.rs")) if (src / "bin").is_dir() else []
    nodes, edges = set(), {}
    for root in roots:
        crate = Crate(name, src)
        crate.load(root)
        top = crate.modules[0]
        nodes |= set(crate.files)
        file_path = {m.file: m.path for m in crate.modules if m.path == () or m.file != m.parent.file}
        for module, segs, file in crate.refs:
            target = target_file(top, module, segs)
            if target is None or target == file or target not in crate.files:
                continue
            src_path, dst_path = file_path[file], file_path[target]
            if not strict and dst_path[: len(src_path)] == src_path:
                continue  # a module's file composing what lies below it
            edges.setdefault(file, set()).add(target)
    comps = [c for c in sccs(nodes, edges) if len(c) > 1]
    return name, comps, edges


# A fixture workspace: crate `a` has a cycle only through re-exports (error.rs -> crate::m::helper, defined in
# m/y.rs, which uses crate::Error); crate `b` has none, as its back edges are in comments, strings and tests.
SELF_TEST = {
    "crates/a/src/lib.rs": "mod error;\npub mod m;\npub use error::Error;\npub use m::x::Thing;\n",
    "crates/a/src/error.rs": "pub enum Error { Bad(crate::Thing) }\nfn z() { crate::m::helper(); }\n",
    "crates/a/src/m/mod.rs": "pub mod x;\npub mod y;\npub use y::helper;\npub trait T {}\n",
    "crates/a/src/m/x.rs": "use super::T;\npub struct Thing;\nimpl T for Thing {}\n",
    "crates/a/src/m/y.rs": "pub fn helper() -> Result<(), crate::Error> { Ok(()) }\n",
    "crates/b/src/lib.rs": "mod p;\nmod q;\n",
    "crates/b/src/p.rs": "pub fn f() { super::q::g() }\n",
    "crates/b/src/q.rs": "/// [`crate::p::f`]\npub fn g() { let _ = \"crate::p::f\"; }\n"
    "#[cfg(test)]\nmod tests { use crate::p::f; }\n#[cfg(test)]\nfn t() { crate::p::f() }\n",
}


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in SELF_TEST.items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for name in ("a", "b"):
            (Path(tmp) / "crates" / name / "Cargo.toml").write_text(f'[package]\nname = "{name}"\n')
        got = {}
        for strict in (False, True):
            for name in ("a", "b"):
                _, comps, _ = crate_cycles(Path(tmp) / "crates" / name / "Cargo.toml", strict)
                got[name, strict] = [sorted(str(p.relative_to(Path(tmp) / "crates" / name)) for p in c) for c in comps]
    want = {
        ("a", False): [["src/error.rs", "src/m/y.rs"]],
        ("b", False): [],
        ("a", True): [["src/error.rs", "src/m/mod.rs", "src/m/x.rs", "src/m/y.rs"]],
        ("b", True): [],
    }
    if got != want:
        print(f"self-test failed:\n  got  {got}\n  want {want}")
        return 1
    print("ok: self-test")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", action="store_true", help="print cycles per crate and exit 0")
    ap.add_argument("--strict", action="store_true", help="count references to descendant modules too")
    ap.add_argument("--root", type=Path, default=ROOT, help="the workspace to check (default: this one)")
    ap.add_argument("--allow", type=Path, help="file naming crates whose cycles do not fail the check")
    ap.add_argument("--self-test", action="store_true", help="check the resolver on a fixture workspace")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    allowed = set()
    if args.allow:
        for line in args.allow.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(line)
    root = args.root.resolve()
    manifests = sorted(root.glob("crates/*/Cargo.toml")) + sorted(root.glob("examples/*/Cargo.toml"))
    failed, seen = False, set()
    for manifest in manifests:
        name, comps, edges = crate_cycles(manifest, args.strict)
        seen.add(name)
        files = sum(len(c) for c in comps)
        if args.count:
            print(f"{name}: {len(comps)} cycles, {files} files")
            continue
        for comp in comps:
            rel = [str(p.relative_to(manifest.parent)) for p in comp]
            tag = "allowed" if name in allowed else "error"
            print(f"{tag}: {name}: files import each other: {', '.join(rel)}")
            for p in comp:
                outs = sorted(str(q.relative_to(manifest.parent)) for q in edges.get(p, ()) if q in comp)
                print(f"    {p.relative_to(manifest.parent)} -> {', '.join(outs)}")
        if comps and name not in allowed:
            failed = True
        if not comps and name in allowed:
            print(f"error: {name} has no cycles now: take it off {args.allow}")
            failed = True
    for name in sorted(allowed - seen):
        print(f"error: {args.allow} names {name}, which is no crate under crates/ or examples/")
        failed = True
    if args.count:
        return 0
    if failed:
        print("Break a cycle by moving what both files need into a module of its own (or next to its one user).")
        return 1
    print("ok: no file import cycles" + (f" outside {', '.join(sorted(allowed))}" if allowed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
