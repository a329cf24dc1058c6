//! Finding and loading `libnccl.so.2` by path.

use std::ffi::CStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::bindings::{Nccl, ncclResult_t};

/// NCCL could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LibraryError {
    /// No candidate loaded; `tried` lists each candidate and why it failed.
    #[error(
        "NCCL library not found; looked in:{}\ninstall it with `pip install nvidia-nccl-cu12` (or -cu13), or set \
         NCCL_LIBRARY=/path/to/libnccl.so.2",
        list(.tried)
    )]
    NotFound {
        /// (candidate, reason) in lookup order.
        tried: Vec<(String, String)>,
    },
}

fn list(tried: &[(String, String)]) -> String {
    let mut s = String::new();
    for (what, why) in tried {
        let _ = write!(s, "\n  - {what}: {why}");
    }
    s
}

/// A loaded NCCL library and where it came from.
pub struct Library {
    raw: Nccl,
    path: PathBuf,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Where a Python NCCL wheel installs the library, relative to a `site-packages` directory.
const WHEEL_LIB: &str = "nvidia/nccl/lib/libnccl.so.2";

/// `site-packages` / `dist-packages` directories under a Python prefix (`<prefix>/lib/python3.*/…`).
fn site_dirs(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .collect();
        names.sort();
        for p in names {
            out.push(p.join("site-packages"));
            out.push(p.join("dist-packages"));
        }
    }
    out
}

/// The candidates [`Library::load`] tries, in order, given a way to read environment variables:
/// `NCCL_LIBRARY`; wheel locations under `PYTHONPATH`, `VIRTUAL_ENV`, `CONDA_PREFIX`, the prefixes of the
/// `python3` directories on `PATH`, pyenv versions, `~/.local`, `/usr/local`, `/usr`, `/opt/conda`; then
/// the loader's search for `libnccl.so.2` and `libnccl.so`. Wheel candidates are only listed if the file
/// exists.
pub fn candidates(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = get("NCCL_LIBRARY").filter(|p| !p.is_empty()) {
        out.push(p);
    }
    let mut sites: Vec<PathBuf> = Vec::new();
    if let Some(pp) = get("PYTHONPATH") {
        sites.extend(std::env::split_paths(&pp));
    }
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = get(var).filter(|p| !p.is_empty()) {
            prefixes.push(PathBuf::from(p));
        }
    }
    if let Some(path) = get("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("python3").exists()
                && let Some(parent) = dir.parent()
            {
                prefixes.push(parent.to_path_buf());
            }
        }
    }
    let home = get("HOME").map(PathBuf::from);
    let pyenv = get("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".pyenv")));
    if let Some(versions) = pyenv.map(|p| p.join("versions"))
        && let Ok(entries) = std::fs::read_dir(versions)
    {
        let mut v: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        v.sort();
        prefixes.extend(v);
    }
    if let Some(h) = &home {
        prefixes.push(h.join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    for prefix in &prefixes {
        sites.extend(site_dirs(prefix));
    }
    sites.push(PathBuf::from("/usr/lib/python3/dist-packages"));
    for site in sites {
        let lib = site.join(WHEEL_LIB);
        let s = lib.display().to_string();
        if lib.is_file() && !out.contains(&s) {
            out.push(s);
        }
    }
    out.push("libnccl.so.2".to_string());
    out.push("libnccl.so".to_string());
    out
}

impl Library {
    /// Loads the first candidate of [`candidates`] (read from the process environment) that works.
    pub fn load() -> Result<Self, LibraryError> {
        let cands = candidates(|k| std::env::var(k).ok());
        let mut tried = Vec::new();
        if std::env::var_os("NCCL_LIBRARY").is_none() {
            tried.push(("NCCL_LIBRARY".to_string(), "not set".to_string()));
        }
        let wheel_found = cands.iter().any(|c| c.ends_with(WHEEL_LIB));
        if !wheel_found {
            tried.push((
                format!("<python site-packages>/{WHEEL_LIB}"),
                "no installed nvidia-nccl wheel found".to_string(),
            ));
        }
        for c in cands {
            match Self::load_from(&c) {
                Ok(lib) => return Ok(lib),
                Err(LibraryError::NotFound { tried: t }) => tried.extend(t),
            }
        }
        Err(LibraryError::NotFound { tried })
    }

    /// Loads the library at `path` (or a bare name, searched by the dynamic loader) and checks that it
    /// is NCCL (`ncclGetVersion` resolves).
    pub fn load_from(path: impl AsRef<Path>) -> Result<Self, LibraryError> {
        let path = path.as_ref();
        let fail = |why: String| LibraryError::NotFound {
            tried: vec![(path.display().to_string(), why)],
        };
        // SAFETY: loading a shared library runs its initialisers; NCCL's only set up internal state
        // (it dlopens libcuda lazily, at communicator creation).
        let raw = unsafe { Nccl::new(path.as_os_str()) }.map_err(|e| fail(e.to_string()))?;
        if raw.ncclGetVersion.is_err() {
            return Err(fail("not an NCCL library (no ncclGetVersion)".to_string()));
        }
        Ok(Library {
            raw,
            path: path.to_path_buf(),
        })
    }

    /// The raw function table. Calling a function the library lacks panics: check the field first
    /// (`lib.raw().ncclCommAbort.is_ok()`) for anything newer than NCCL 2.4.
    pub fn raw(&self) -> &Nccl {
        &self.raw
    }

    /// What was loaded (a path, or the bare name the loader resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `ncclGetVersion`: e.g. 23203 for 2.32.3.
    pub fn version(&self) -> Result<i32, ncclResult_t> {
        let mut v = 0;
        // SAFETY: resolved at load; writes one int.
        let rc = unsafe { self.raw.ncclGetVersion(&mut v) };
        if rc == ncclResult_t::ncclSuccess {
            Ok(v)
        } else {
            Err(rc)
        }
    }

    /// The version as `major.minor.patch` (`unknown` if the call fails).
    pub fn version_string(&self) -> String {
        match self.version() {
            Ok(v) if v >= 10000 => format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100),
            Ok(v) => format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100),
            Err(_) => "unknown".to_string(),
        }
    }

    /// `ncclGetErrorString` for a result code (a fixed string owned by the library).
    pub fn error_string(&self, code: ncclResult_t) -> String {
        let Ok(f) = &self.raw.ncclGetErrorString else {
            return format!("NCCL error {}", code.0);
        };
        // SAFETY: returns a pointer to a static string, or null for codes it does not know.
        let p = unsafe { f(code) };
        if p.is_null() {
            return format!("NCCL error {}", code.0);
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `ncclGetLastError` for a communicator (or null): the detailed message of the last failure.
    pub fn last_error(&self, comm: crate::bindings::ncclComm_t) -> Option<String> {
        let f = self.raw.ncclGetLastError.as_ref().ok()?;
        // SAFETY: returns a pointer to a thread-local or static string, possibly empty.
        let p = unsafe { f(comm) };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated.
        let s = unsafe { CStr::from_ptr(p) }
            .to_string_lossy()
            .trim()
            .to_string();
        (!s.is_empty()).then_some(s)
    }
}

/// Name of a result code, for messages.
pub fn result_name(code: ncclResult_t) -> &'static str {
    match code {
        ncclResult_t::ncclSuccess => "ncclSuccess",
        ncclResult_t::ncclUnhandledCudaError => "ncclUnhandledCudaError",
        ncclResult_t::ncclSystemError => "ncclSystemError",
        ncclResult_t::ncclInternalError => "ncclInternalError",
        ncclResult_t::ncclInvalidArgument => "ncclInvalidArgument",
        ncclResult_t::ncclInvalidUsage => "ncclInvalidUsage",
        ncclResult_t::ncclRemoteError => "ncclRemoteError",
        ncclResult_t::ncclInProgress => "ncclInProgress",
        _ => "unknown NCCL result",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_library_env_comes_first_and_system_names_last() {
        let c = candidates(|k| match k {
            "NCCL_LIBRARY" => Some("/opt/x/libnccl.so.2".into()),
            _ => None,
        });
        assert_eq!(c.first().map(String::as_str), Some("/opt/x/libnccl.so.2"));
        assert_eq!(&c[c.len() - 2..], ["libnccl.so.2", "libnccl.so"]);
    }

    #[test]
    fn a_wheel_in_a_virtualenv_is_found() {
        let dir =
            std::env::temp_dir().join(format!("kubetrain-nccl-sys-test-{}", std::process::id()));
        let lib = dir.join("lib/python3.11/site-packages").join(WHEEL_LIB);
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"not really a library").unwrap();
        let venv = dir.display().to_string();
        let c = candidates(|k| (k == "VIRTUAL_ENV").then(|| venv.clone()));
        assert_eq!(c[0], lib.display().to_string());
        // It is found but is not a loadable library: the error says so for that path.
        let err = Library::load_from(&lib).unwrap_err().to_string();
        assert!(err.contains(&lib.display().to_string()), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_library_is_an_error_that_lists_where_it_looked() {
        let err = Library::load_from("/nonexistent/libnccl.so.2")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/nonexistent/libnccl.so.2")
                && err.contains("pip install nvidia-nccl-cu12"),
            "{err}"
        );
    }

    #[test]
    fn a_library_that_is_not_nccl_is_refused() {
        let err = Library::load_from("libc.so.6").unwrap_err().to_string();
        assert!(err.contains("not an NCCL library"), "{err}");
    }
}
