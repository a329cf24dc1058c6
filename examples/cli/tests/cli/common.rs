//! What every module runs the CLI with: the binary, its output as text, scratch files and the example
//! manifests.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `kubetrain` binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_kubetrain");

/// A `kubetrain` command, to add env or pipes to before running it.
pub fn command() -> Command {
    Command::new(BIN)
}

/// Runs `kubetrain args`, feeding `stdin` when given (otherwise stdin is empty, as `Command::output` has it).
pub fn kubetrain(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = command()
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubetrain runs");
    let input = child.stdin.take();
    std::thread::scope(|s| {
        // Written beside the reading: a large input must not wait for a child blocked on a full stdout.
        if let (Some(mut pipe), Some(text)) = (input, stdin) {
            s.spawn(move || {
                // The child may exit before reading everything (an error on document 1); that is its answer.
                let _ = pipe.write_all(text.as_bytes());
            });
        }
        child.wait_with_output().expect("kubetrain exits")
    })
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `content` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

/// A path as a command-line argument (temporary and repository paths are UTF-8 here).
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// `examples/<relative>`, e.g. `manifests/quickstart.yaml`.
pub fn example(relative: &str) -> String {
    format!("{}/../{relative}", env!("CARGO_MANIFEST_DIR"))
}

/// The quick-start TrainJob (`examples/manifests/quickstart.yaml`).
pub fn quickstart() -> String {
    example("manifests/quickstart.yaml")
}
