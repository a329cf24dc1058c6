//! The function trainer: Python code run by the runtime's image, as the Python SDK's
//! `CustomTrainer(func=...)` builds it.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::python::{PyValue, dedent, function_source, shlex_quote};
use crate::error::{ClientError, Result};

/// The index `packages_to_install` come from when no other is given (`DEFAULT_PIP_INDEX_URLS`).
pub const DEFAULT_PIP_INDEX_URL: &str = "https://pypi.org/simple";

/// Where OpenMPI runtimes write the function file (`DEFAULT_MPI_USER_HOME`).
pub const DEFAULT_MPI_USER_HOME: &str = "/home/mpiuser";

/// The script the SDK's runtime entrypoints share; `{func_code}` and `{func_file}` are filled in.
fn exec_script(entrypoint: &str) -> String {
    format!(
        "\nread -r -d '' SCRIPT << EOM\n\n{{func_code}}\nEOM\nprintf \"%s\" \"$SCRIPT\" > \"{{func_file}}\"\n{entrypoint} \"{{func_file}}\""
    )
}

/// The trainer entrypoint the Python SDK derives for a runtime (`RuntimeTrainer.command`): `tune run`
/// for TorchTune, `torchrun` for a torch ML policy, `mpirun --hostfile /etc/mpi/hostfile` + python for
/// MPI, plain `python` otherwise.
pub fn sdk_entrypoint(framework: &str, ml_policy: Option<&kubetrain_api::MLPolicy>) -> Vec<String> {
    use kubetrain_api::MLPolicySource;
    let source = ml_policy.and_then(|m| m.source.as_ref());
    let bash = |entry: &str| vec!["bash".to_string(), "-c".to_string(), exec_script(entry)];
    if framework == "torchtune" {
        return vec!["tune".into(), "run".into()];
    }
    match source {
        Some(MLPolicySource::Torch(_)) => bash("torchrun"),
        Some(MLPolicySource::Mpi(_)) => {
            let mut c = vec![
                "mpirun".to_string(),
                "--hostfile".into(),
                "/etc/mpi/hostfile".into(),
            ];
            c.extend(bash("python"));
            c
        }
        _ => bash("python"),
    }
}

/// Python training code and how to call it: the Python SDK's `CustomTrainer`.
///
/// The function's source is found by name in a file or a text, as `inspect.getsource` would return it;
/// the container command embeds it with `name(**func_args)` and runs it with the runtime's entrypoint,
/// after `pip install` of `packages_to_install` when there are any.
///
/// ```
/// use kubetrain_client::trainer::{FunctionTrainer, PyValue};
/// let code = "def train(lr):\n    print('lr', lr)\n";
/// let t = FunctionTrainer::from_source(code, "train")
///     .unwrap()
///     .with_func_args([("lr", PyValue::from(0.01))])
///     .with_num_nodes(2);
/// let command = t.command(&kubetrain_client::trainer::sdk_entrypoint("torch", None)).unwrap();
/// assert_eq!(command[..2], ["bash", "-c"]);
/// assert!(command[2].contains("def train(lr):\n    print('lr', lr)\n\ntrain(**{'lr': 0.01})\n"));
/// assert!(command[2].ends_with("python \"train.py\""));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionTrainer {
    /// The function's name.
    pub func_name: String,
    /// Its source as `inspect.getsource` gives it (decorators, header, body; lines end in `\n`).
    pub func_source: String,
    /// The file name the code is written to in the container (the basename of the defining file).
    pub file_name: String,
    /// Keyword arguments: the call is `name(**{...})`; `None` calls `name()`.
    pub func_args: Option<Vec<(String, PyValue)>>,
    /// Image (default: the runtime's).
    pub image: Option<String>,
    /// Packages `pip install`ed before the function runs.
    pub packages_to_install: Vec<String>,
    /// Package indexes: the first is `--index-url`, the others `--extra-index-url`.
    pub pip_index_urls: Vec<String>,
    /// Nodes (pods).
    pub num_nodes: Option<i32>,
    /// Resources of each node (see [`resources`](super::resources) for the SDK's shorthand).
    pub resources_per_node: Option<ResourceRequirements>,
    /// Environment of the trainer.
    pub env: BTreeMap<String, String>,
}

impl FunctionTrainer {
    /// The function `func_name` of the Python text `source`, written to `train.py` in the container.
    pub fn from_source(source: &str, func_name: &str) -> Result<Self> {
        let func_source = function_source(source, func_name).ok_or_else(|| {
            ClientError::InvalidArgument(format!(
                "trainer.func: no function {func_name:?} in the source (expected a line `def {func_name}(...):`)"
            ))
        })?;
        Ok(FunctionTrainer {
            func_name: func_name.to_string(),
            func_source,
            file_name: "train.py".into(),
            func_args: None,
            image: None,
            packages_to_install: Vec::new(),
            pip_index_urls: vec![DEFAULT_PIP_INDEX_URL.to_string()],
            num_nodes: None,
            resources_per_node: None,
            env: BTreeMap::new(),
        })
    }

    /// The function `func_name` of the Python file at `path`; the container file keeps its name.
    pub fn from_file(path: impl AsRef<Path>, func_name: &str) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ClientError::io(format!("reading {}", path.display()), e))?;
        let mut t = Self::from_source(&text, func_name).map_err(|e| match e {
            ClientError::InvalidArgument(m) => {
                ClientError::InvalidArgument(m.replace("the source", &path.display().to_string()))
            }
            other => other,
        })?;
        if let Some(name) = path.file_name() {
            t.file_name = name.to_string_lossy().into_owned();
        }
        Ok(t)
    }

    /// Sets the container file name (the SDK uses the basename of the file the function is defined in).
    pub fn with_file_name(mut self, name: impl Into<String>) -> Self {
        self.file_name = name.into();
        self
    }

    /// Sets the keyword arguments.
    pub fn with_func_args<K: Into<String>, I: IntoIterator<Item = (K, PyValue)>>(
        mut self,
        args: I,
    ) -> Self {
        self.func_args = Some(args.into_iter().map(|(k, v)| (k.into(), v)).collect());
        self
    }

    /// Sets the packages to install.
    pub fn with_packages<S: Into<String>, I: IntoIterator<Item = S>>(mut self, p: I) -> Self {
        self.packages_to_install = p.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the package indexes (first: `--index-url`).
    pub fn with_pip_index_urls<S: Into<String>, I: IntoIterator<Item = S>>(
        mut self,
        urls: I,
    ) -> Self {
        self.pip_index_urls = urls.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the node count.
    pub fn with_num_nodes(mut self, n: i32) -> Self {
        self.num_nodes = Some(n);
        self
    }

    /// Sets the image.
    pub fn with_image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }

    /// Sets the resources of each node.
    pub fn with_resources(mut self, r: ResourceRequirements) -> Self {
        self.resources_per_node = Some(r);
        self
    }

    /// Adds an env var.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// The code the container runs: the dedented function, a blank line and the call.
    pub fn code(&self) -> String {
        let call = match &self.func_args {
            None => format!("{}()", self.func_name),
            Some(args) => format!("{}(**{})", self.func_name, PyValue::Dict(args.clone())),
        };
        format!("{}\n{call}\n", dedent(&self.func_source))
    }

    /// The container command for a runtime whose SDK entrypoint is `entrypoint`
    /// ([`Runtime::trainer`](crate::Runtime)`.command`): every element holding `{func_file}` gets the
    /// code, the file name and, first, the pip install script.
    pub fn command(&self, entrypoint: &[String]) -> Result<Vec<String>> {
        if entrypoint.is_empty() {
            return Err(ClientError::InvalidArgument(
                "runtime.trainer.command: the runtime has no trainer entrypoint".into(),
            ));
        }
        if !self.packages_to_install.is_empty() && self.pip_index_urls.is_empty() {
            return Err(ClientError::InvalidArgument(
                "trainer.pip_index_urls: packages_to_install needs at least one index URL (e.g. https://pypi.org/simple)".into(),
            ));
        }
        let mpi = entrypoint[0] == "mpirun";
        let (file, log) = if mpi {
            (
                format!("{DEFAULT_MPI_USER_HOME}/{}", self.file_name),
                format!("{DEFAULT_MPI_USER_HOME}/pip_install.log"),
            )
        } else {
            (self.file_name.clone(), "pip_install.log".to_string())
        };
        let install = if self.packages_to_install.is_empty() {
            String::new()
        } else {
            pip_install_script(&self.packages_to_install, &self.pip_index_urls, &log)
        };
        let code = self.code();
        Ok(entrypoint
            .iter()
            .map(|c| {
                if c.contains("{func_file}") {
                    format!("{install}{}", fill(c, &code, &file))
                } else {
                    c.clone()
                }
            })
            .collect())
    }
}

/// `str.format(func_code=..., func_file=...)` on the entrypoint text: one pass, so braces in the code are
/// left alone.
fn fill(template: &str, code: &str, file: &str) -> String {
    let mut out = String::with_capacity(template.len() + code.len());
    let mut rest = template;
    while let Some(p) = rest.find('{') {
        out.push_str(&rest[..p]);
        let tail = &rest[p..];
        if let Some(t) = tail.strip_prefix("{func_code}") {
            out.push_str(code);
            rest = t;
        } else if let Some(t) = tail.strip_prefix("{func_file}") {
            out.push_str(file);
            rest = t;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The install script the SDK puts before the function: `pip install --user`, then system-wide, quiet
/// unless both fail.
pub fn pip_install_script(packages: &[String], index_urls: &[String], log_file: &str) -> String {
    let packages = packages
        .iter()
        .map(|p| shlex_quote(p))
        .collect::<Vec<_>>()
        .join(" ");
    let mut options = Vec::new();
    if let Some((first, extra)) = index_urls.split_first() {
        options.push(format!("--index-url {}", shlex_quote(first)));
        options.extend(
            extra
                .iter()
                .map(|u| format!("--extra-index-url {}", shlex_quote(u))),
        );
    }
    let options = options.join(" ");
    let pip = "PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 python -m pip install --quiet \\\n    --no-warn-script-location \"${PIP_OPTS[@]}\"";
    format!(
        "\nif ! [ -x \"$(command -v pip)\" ]; then\n    python -m ensurepip || python -m ensurepip --user || apt-get install python-pip\nfi\n\n\
         \nPACKAGES=({packages})\nPIP_OPTS=({options})\nLOG_FILE=\"{log_file}\"\nrm -f \"$LOG_FILE\"\n\n\
         if {pip} --user \"${{PACKAGES[@]}}\" >\"$LOG_FILE\" 2>&1; then\n    echo \"Successfully installed Python packages (user): ${{PACKAGES[*]}}\"\n\
         elif {pip} \"${{PACKAGES[@]}}\" >>\"$LOG_FILE\" 2>&1; then\n    echo \"Successfully installed Python packages (system-wide): ${{PACKAGES[*]}}\"\n\
         else\n    echo \"ERROR: Failed to install Python packages: ${{PACKAGES[*]}}\" >&2\n    cat \"$LOG_FILE\" >&2\n    exit 1\nfi\n\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_script_is_the_sdks() {
        // The text kubeflow==0.5.0's get_script_for_python_packages(['a', 'b[x]'], ['https://x', 'https://y'])
        // returns (checked end to end against the SDK itself in tests/python_sdk_parity.rs).
        let want = "\nif ! [ -x \"$(command -v pip)\" ]; then\n    python -m ensurepip || python -m ensurepip --user || apt-get install python-pip\nfi\n\n\nPACKAGES=(a 'b[x]')\nPIP_OPTS=(--index-url https://x --extra-index-url https://y)\nLOG_FILE=\"pip_install.log\"\nrm -f \"$LOG_FILE\"\n\nif PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 python -m pip install --quiet \\\n    --no-warn-script-location \"${PIP_OPTS[@]}\" --user \"${PACKAGES[@]}\" >\"$LOG_FILE\" 2>&1; then\n    echo \"Successfully installed Python packages (user): ${PACKAGES[*]}\"\nelif PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 python -m pip install --quiet \\\n    --no-warn-script-location \"${PIP_OPTS[@]}\" \"${PACKAGES[@]}\" >>\"$LOG_FILE\" 2>&1; then\n    echo \"Successfully installed Python packages (system-wide): ${PACKAGES[*]}\"\nelse\n    echo \"ERROR: Failed to install Python packages: ${PACKAGES[*]}\" >&2\n    cat \"$LOG_FILE\" >&2\n    exit 1\nfi\n\n";
        let got = pip_install_script(
            &["a".into(), "b[x]".into()],
            &["https://x".into(), "https://y".into()],
            "pip_install.log",
        );
        assert_eq!(got, want);
    }

    #[test]
    fn entrypoints() {
        let torch = sdk_entrypoint("torch", None);
        assert_eq!(
            torch[2],
            "\nread -r -d '' SCRIPT << EOM\n\n{func_code}\nEOM\nprintf \"%s\" \"$SCRIPT\" > \"{func_file}\"\npython \"{func_file}\""
        );
        assert_eq!(sdk_entrypoint("torchtune", None), ["tune", "run"]);
    }

    #[test]
    fn braces_in_code_survive() {
        let t =
            FunctionTrainer::from_source("def f():\n    print({'{func_file}': 1})\n", "f").unwrap();
        let c = t.command(&sdk_entrypoint("x", None)).unwrap();
        assert!(c[2].contains("print({'{func_file}': 1})"), "{}", c[2]);
    }

    #[test]
    fn missing_function_is_a_clear_error() {
        let err = FunctionTrainer::from_source("def g(): pass\n", "f").unwrap_err();
        assert_eq!(
            err.to_string(),
            "trainer.func: no function \"f\" in the source (expected a line `def f(...):`)"
        );
    }
}
