//! Errors of the strategic-merge-patch engine.

use std::fmt;

/// A strategic merge patch that cannot be applied. `path` is the JSON path inside the patched document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SmpError {
    /// The original or the patch is not a JSON object at the top level.
    #[error("{path}: expected an object, found {found}")]
    NotAnObject {
        /// Where the object was expected.
        path: String,
        /// What was found instead.
        found: &'static str,
    },
    /// `$patch` holds a value other than `replace` or `delete` (in an object) or `replace`/`delete` (in a list item).
    #[error("{path}: unsupported $patch directive {value:?}; use \"replace\" or \"delete\"")]
    BadDirective {
        /// Where the directive was found.
        path: String,
        /// The directive value.
        value: String,
    },
    /// A list item lacks the list's merge key.
    #[error("{path}: list item has no merge key {key:?}")]
    MissingMergeKey {
        /// The list.
        path: String,
        /// The merge key, e.g. `name`.
        key: &'static str,
    },
    /// A list mixes items of different JSON types, or nests lists.
    #[error("{path}: list items must all be objects or all be scalars of one type")]
    MixedList {
        /// The list.
        path: String,
    },
    /// A list of objects merged without a merge key.
    #[error("{path}: cannot merge a list of objects without a merge key")]
    NoMergeKey {
        /// The list.
        path: String,
    },
    /// `$retainKeys` is not a list of strings, or the patch sets a key it does not retain.
    #[error("{path}: invalid $retainKeys: {reason}")]
    BadRetainKeys {
        /// The object carrying the directive.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// `$setElementOrder/<list>` is malformed or disagrees with the order of the patch list.
    #[error("{path}: invalid $setElementOrder: {reason}")]
    BadSetElementOrder {
        /// The list.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// `$deleteFromPrimitiveList/<list>` is not a list.
    #[error("{path}: $deleteFromPrimitiveList must be a list of scalars")]
    BadDeleteList {
        /// The list.
        path: String,
    },
}

/// A zero-allocation path through the document; rendered only when an error is built.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => f.write_str("<root>"),
            Path::Key(Path::Root, k) => f.write_str(k),
            Path::Key(parent, k) => write!(f, "{parent}.{k}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

impl<'a> Path<'a> {
    pub(crate) fn key(&'a self, k: &'a str) -> Path<'a> {
        Path::Key(self, k)
    }
    pub(crate) fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_field_paths() {
        let root = Path::Root;
        let a = root.key("replicatedJobs");
        let b = a.index(1);
        let c = b.key("template");
        assert_eq!(c.to_string(), "replicatedJobs[1].template");
        assert_eq!(root.to_string(), "<root>");
    }
}
