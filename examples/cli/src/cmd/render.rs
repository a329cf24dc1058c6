//! `kubetrain render`: every object the controller would apply for each TrainJob, without a cluster.
//!
//! Input is streamed document by document, and each TrainJob's objects are written as soon as they are
//! rendered, so memory stays flat in the number of documents.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use kubetrain_api::catalog::DEFAULT_NAMESPACE;
use kubetrain_api::validation::validate_trainjob;
use kubetrain_api::{Document, FieldError, RuntimeCatalog, TrainJob};
use kubetrain_jobset::ssh::{ChaCha20Rng, KeyPool, seed_from_text, seeded_rng};
use kubetrain_jobset::{
    Object, Observed, RenderError, RenderOptions, TrainJobStatusOptions, render_with, resolve,
};
use kubetrain_yaml::DocumentStream;
use serde_json::Value;

use super::input;

/// `kubetrain render` arguments.
#[derive(Debug, Args)]
pub(crate) struct RenderArgs {
    /// TrainJob documents (YAML or JSON, one or many); `-` reads stdin, a directory its .yaml, .yml and .json
    /// files; repeatable. Runtimes in them are used too, by the TrainJobs after them.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "TRAINJOBS.yaml",
        required = true
    )]
    files: Vec<PathBuf>,
    /// TrainingRuntime / ClusterTrainingRuntime documents (files or directories); repeatable. Built-in
    /// runtimes fill in the rest.
    #[arg(long = "runtime", value_name = "RUNTIMES.yaml")]
    runtimes: Vec<PathBuf>,
    /// Output format: multi-document YAML or a JSON array.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    output: Format,
    /// Reproducible key material (MPI SSH keys), derived from this seed and each TrainJob's uid (or
    /// namespace/name): for tests and diffs only, the keys are not secret. By default keys come from the
    /// operating system's randomness.
    #[arg(long)]
    seed: Option<u64>,
    /// Skip the webhook's checks between a TrainJob and its runtime (parse errors, render errors and what the API
    /// server would refuse — the CRD schema and CEL rules, which every render runs — are still reported); for
    /// bulk streams of TrainJobs already validated elsewhere.
    #[arg(long)]
    no_validate: bool,
    /// Enable the TrainJobStatus plugin (upstream feature gate, off by default) with this CA certificate of the
    /// operator's webhook Secret (`ca.crt`): trainer containers get the status server's URL, CA and token.
    #[arg(long, value_name = "CA.crt")]
    trainjob_status_ca: Option<PathBuf>,
    /// The operator's namespace, for the status server's URL (with --trainjob-status-ca).
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "kubeflow-system",
        requires = "trainjob_status_ca"
    )]
    operator_namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

fn open(path: &Path) -> Result<Box<dyn BufRead>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufReader::new(io::stdin().lock())));
    }
    let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
}

/// Why a document could not be read.
enum Unread {
    /// Not YAML, or too large: the whole line to print (`FILE: invalid YAML: document N (from line L): ...`).
    Text(String),
    /// Field errors of a trainer object, and who it is when it claims to be a training runtime.
    Fields(Vec<FieldError>, Option<input::BrokenRuntime>),
}

/// What went wrong so far and is not printed yet, and the runtimes found invalid.
#[derive(Default)]
struct Problems {
    errors: Vec<FieldError>,
    unread: Vec<String>,
    broken: Vec<input::BrokenRuntime>,
}

impl Problems {
    fn add(&mut self, unread: Unread) {
        match unread {
            Unread::Text(line) => self.unread.push(line),
            Unread::Fields(mut errors, identity) => {
                self.broken.extend(identity);
                self.errors.append(&mut errors);
            }
        }
    }

    /// Prints what is pending; `true` when there was anything.
    fn report(&mut self) -> bool {
        let any = !self.unread.is_empty() || !self.errors.is_empty();
        for line in self.unread.drain(..) {
            eprintln!("{line}");
        }
        for e in self.errors.drain(..) {
            eprintln!("{e}");
        }
        any
    }
}

/// Where a document came from, for messages.
struct Place<'a> {
    source: &'a str,
    /// The document's number in its file (from 1), its first line and the line its text starts on.
    number: usize,
    line: usize,
    text_line: usize,
}

/// Parses one document; `Ok(None)` for an empty one.
fn parse(text: &str, place: &Place<'_>) -> Result<Option<Document>, Unread> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    // The fast reader for plain manifests, serde-saphyr for anything else (same value, same errors).
    let value: Value = kubetrain_yaml::fast::from_str(text).map_err(|e| {
        Unread::Text(format!(
            "{}: invalid YAML: document {} (from line {}): {}",
            place.source,
            place.number,
            place.line,
            kubetrain_yaml::yaml_error(&e, place.text_line)
        ))
    })?;
    if value.is_null() {
        return Ok(None);
    }
    let identity = input::BrokenRuntime::of(&value, place.source);
    kubetrain_api::parse_value(value, place.number - 1)
        .map(Some)
        .map_err(|e| Unread::Fields(e, identity))
}

/// Reads the documents of `path` one at a time (memory stays flat) and hands each non-empty one to `each`,
/// read or with why not. With `unchecked_trainjobs` (`--no-validate`), a TrainJob is read straight into its
/// typed form (no unknown-field pass); anything else takes the checked path.
fn read_documents(
    path: &Path,
    unchecked_trainjobs: bool,
    mut each: impl FnMut(Result<Document, Unread>) -> Result<()>,
) -> Result<()> {
    let source = input::display_name(path);
    let mut documents = DocumentStream::new(open(path)?);
    while let Some(text) = documents.next() {
        let place = Place {
            source: &source,
            number: documents.number(),
            line: documents.start_line(),
            text_line: documents.text_line(),
        };
        let text = match text.with_context(|| format!("cannot read {source}"))? {
            Ok(text) => text,
            Err(too_large) => {
                each(Err(Unread::Text(format!("{source}: {too_large}"))))?;
                continue;
            }
        };
        let unchecked = if unchecked_trainjobs {
            // The fast reader's TrainJob is the one serde-saphyr reads (a differential fuzz target checks
            // it); when it declines, serde-saphyr's own typed read decides.
            kubetrain_yaml::fast::from_str_typed::<TrainJob>(&text)
                .or_else(|| serde_saphyr::from_str::<TrainJob>(&text).ok())
        } else {
            None
        };
        let parsed = match unchecked {
            Some(job) => Ok(Some(Document::TrainJob(Box::new(job)))),
            None => parse(&text, &place),
        };
        match parsed {
            Ok(None) => {}
            Ok(Some(document)) => each(Ok(document))?,
            Err(unread) => each(Err(unread))?,
        }
    }
    Ok(())
}

fn load_runtimes(
    paths: &[PathBuf],
    catalog: &mut RuntimeCatalog,
    problems: &mut Problems,
) -> Result<()> {
    for path in paths {
        let source = input::display_name(path);
        read_documents(path, false, |read| {
            match read {
                Ok(doc) => {
                    if !catalog.add_document(&doc) {
                        problems.errors.push(
                            FieldError::error("kind", format!("{source} is given with --runtime, which takes TrainingRuntime or ClusterTrainingRuntime documents"))
                                .on(doc.kind(), doc.name()),
                        );
                    }
                }
                Err(unread) => problems.add(unread),
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// What `--seed` prints: reproducible keys can be recomputed by anyone who has the seed and the job's name.
const SEED_WARNING: &str = "warning: --seed makes the MPI SSH keys reproducible: anyone who knows the seed and a \
TrainJob's name can recompute its private key; do not apply this output to a cluster";

/// Where key material comes from: keys generated ahead from OS randomness on the other CPUs (a pool
/// that starts with the first MPI TrainJob), or, with `--seed`, a random stream per TrainJob derived
/// from the seed and the TrainJob's identity (so that two TrainJobs in one stream get different keys
/// and the output does not depend on document order).
enum Keys {
    Random(KeyPool),
    Seeded(u64),
}

impl Keys {
    fn new(seed: Option<u64>) -> Self {
        match seed {
            Some(seed) => Self::Seeded(seed),
            None => Self::Random(KeyPool::for_this_machine()),
        }
    }
}

/// The reproducible random source of one TrainJob under `--seed`.
fn seeded_rng_for(job: &TrainJob, seed: u64) -> ChaCha20Rng {
    let identity = job.metadata.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            job.metadata
                .namespace
                .as_deref()
                .unwrap_or(DEFAULT_NAMESPACE),
            job.name()
        )
    });
    seeded_rng(seed_from_text(&format!("{seed}/{identity}")))
}

struct Output<W: Write> {
    out: W,
    buf: String,
    yaml: kubetrain_yaml::Writer,
    format: Format,
    written: usize,
}

impl<W: Write> Output<W> {
    fn begin(&mut self) -> Result<()> {
        if self.format == Format::Json {
            self.out.write_all(b"[")?;
        }
        Ok(())
    }

    fn object(&mut self, object: &Object) -> Result<()> {
        match self.format {
            Format::Yaml => {
                if self.written > 0 {
                    self.out.write_all(b"---\n")?;
                }
                self.buf.clear();
                self.yaml.write(&mut self.buf, object)?;
                self.out.write_all(self.buf.as_bytes())?;
            }
            Format::Json => {
                self.out
                    .write_all(if self.written > 0 { b",\n" } else { b"\n" })?;
                serde_json::to_writer_pretty(&mut self.out, object)?;
            }
        }
        self.written += 1;
        Ok(())
    }

    fn end(mut self) -> Result<()> {
        if self.format == Format::Json {
            self.out
                .write_all(if self.written > 0 { b"\n]\n" } else { b"]\n" })?;
        }
        self.out.flush()?;
        Ok(())
    }
}

fn render_options(args: &RenderArgs) -> Result<RenderOptions> {
    let Some(path) = &args.trainjob_status_ca else {
        return Ok(RenderOptions::default());
    };
    let ca_cert = std::fs::read_to_string(path)
        .with_context(|| format!("--trainjob-status-ca: cannot read {}", path.display()))?;
    let server = kubetrain_jobset::StatusServerAddress {
        operator_namespace: args.operator_namespace.clone(),
        ..Default::default()
    };
    Ok(RenderOptions {
        trainjob_status: Some(TrainJobStatusOptions {
            server,
            ca_cert: ca_cert.into(),
        }),
    })
}

fn render_job(
    job: &TrainJob,
    catalog: &RuntimeCatalog,
    args: &RenderArgs,
    options: &RenderOptions,
    keys: &mut Keys,
) -> Result<Vec<Object>, Vec<FieldError>> {
    let found: Vec<FieldError> = if args.no_validate {
        Vec::new()
    } else {
        validate_trainjob(job, catalog)
    };
    let (errors, warnings): (Vec<_>, Vec<_>) = found.into_iter().partition(FieldError::is_error);
    for w in warnings {
        eprintln!("warning: {w}");
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let fail = |path: String, message: String| {
        vec![FieldError::error(path, message).on("TrainJob", job.name())]
    };
    let runtime = resolve(catalog, job).map_err(|e| fail(e.field_path(), e.message()))?;
    let observed = Observed::default();
    let rendered = match keys {
        Keys::Random(pool) => render_with(job, runtime, &observed, options, pool),
        Keys::Seeded(seed) => render_with(
            job,
            runtime,
            &observed,
            options,
            &mut seeded_rng_for(job, *seed),
        ),
    }
    .map_err(|e| match e {
        // What the API server would refuse (reached with --no-validate): every error, as `validate` prints it.
        RenderError::Invalid { errors } => errors,
        e => fail(e.field_path(), e.message()),
    })?;
    Ok(rendered.objects)
}

pub(crate) fn run(args: RenderArgs) -> Result<ExitCode> {
    let options = render_options(&args)?;
    let files = input::expand(&args.files)?;
    let runtimes = input::expand(&args.runtimes)?;
    let mut keys = Keys::new(args.seed);
    if args.seed.is_some() {
        eprintln!("{SEED_WARNING}");
    }
    let mut problems = Problems::default();
    let mut catalog = RuntimeCatalog::new();
    load_runtimes(&runtimes, &mut catalog, &mut problems)?;
    input::add_builtins(&mut catalog, &problems.broken);

    let stdout = io::stdout().lock();
    let mut out = Output {
        out: BufWriter::with_capacity(1 << 16, stdout),
        buf: String::new(),
        yaml: Default::default(),
        format: args.output,
        written: 0,
    };
    out.begin()?;
    let mut failed = problems.report();

    for path in &files {
        read_documents(path, args.no_validate, |read| {
            let job = match read {
                Ok(Document::TrainJob(job)) => job,
                Ok(doc) => {
                    if !catalog.add_document(&doc) {
                        problems.errors.push(
                            FieldError::error("kind", "expected a TrainJob (or a runtime it uses)")
                                .on(doc.kind(), doc.name()),
                        );
                    }
                    failed |= problems.report();
                    return Ok(());
                }
                Err(unread) => {
                    problems.add(unread);
                    failed |= problems.report();
                    return Ok(());
                }
            };
            if let Some(finding) = input::broken_runtime_finding(&job, &problems.broken) {
                problems.errors.push(finding);
                failed |= problems.report();
                return Ok(());
            }
            match render_job(&job, &catalog, &args, &options, &mut keys) {
                Ok(objects) => {
                    for object in &objects {
                        out.object(object)?;
                    }
                }
                Err(mut e) => {
                    problems.errors.append(&mut e);
                    failed |= problems.report();
                }
            }
            Ok(())
        })?;
    }
    out.end()?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_per_job_and_follow_the_seed_flag() {
        use rand_core::RngCore;
        let job = |name: &str| TrainJob::new(name, Default::default());
        let draw = |j: &TrainJob, s| seeded_rng_for(j, s).next_u64();
        assert_eq!(draw(&job("a"), 1), draw(&job("a"), 1));
        assert_ne!(draw(&job("a"), 1), draw(&job("b"), 1));
        assert_ne!(draw(&job("a"), 1), draw(&job("a"), 2));
    }

    #[test]
    fn without_a_seed_keys_come_from_the_os() {
        use kubetrain_jobset::ssh::KeySource as _;
        let key = || match Keys::new(None) {
            Keys::Random(mut pool) => pool.key_pair(),
            Keys::Seeded(_) => unreachable!("no seed given"),
        };
        assert_ne!(key(), key(), "every run draws fresh keys");
    }
}
