//! One module per subcommand.

pub(crate) mod crd;
pub(crate) mod validate;
// modules: render (issue 3)
pub(crate) mod queue;
// modules: queue (issue 4)
// modules: collective (issue 5)
pub(crate) mod init;
// modules: init (issue 8)
