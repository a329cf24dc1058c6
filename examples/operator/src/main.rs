//! `kubetrain-operator`: flag parsing, logging and one call to [`kubetrain_controller::Operator`], which runs
//! the TrainJob controller, the admission webhooks, the status server, Lease leader election and the
//! probe/metrics endpoints side by side until SIGTERM or Ctrl-C. The work is in the library
//! ([`kubetrain_operator::main_with`]), which custom operators reuse with their plugins.

fn main() -> std::process::ExitCode {
    kubetrain_operator::main_with("kubetrain-operator", |operator| operator)
}
