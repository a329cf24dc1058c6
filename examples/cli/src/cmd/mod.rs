//! One module per subcommand.

pub(crate) mod crd;
pub(crate) mod input;
pub(crate) mod render;
pub(crate) mod validate;
// modules: render (issue 3)
pub(crate) mod queue;
// modules: queue (issue 4)
pub(crate) mod collective;
// modules: collective (issue 5)
pub(crate) mod init;
// modules: init (issue 8)
pub(crate) mod run;
// modules: run (issue 6)
pub(crate) mod jobs;
// modules: jobs (issue 6)
pub(crate) mod acceptance;
// modules: acceptance (issue 17)
pub(crate) mod advice;
pub(crate) mod migrate;
pub(crate) mod optimize;
pub(crate) mod tenancy;

/// Reads a whole input file, or stdin for `-`.
pub(crate) fn read_input(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)
            .context("reading stdin")?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}
