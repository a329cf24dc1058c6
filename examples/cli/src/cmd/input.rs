//! What the subcommands share on input and output: `-f/--filename` as kubectl reads it (files, directories,
//! `-` for stdin, repeatable), durations (`30s`, `5m`, `1h30m`), aligned tables, and the documents of the
//! given files checked as `kubetrain validate` checks them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kubetrain_api::validation::validate_document;
use kubetrain_api::{Document, FieldError, RuntimeCatalog, TrainJob, constants};

/// The extensions kubectl reads from a directory given to `-f`.
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// The name an input shows in messages: its path, or `<stdin>` for `-`.
pub(crate) fn display_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "<stdin>".to_owned()
    } else {
        path.display().to_string()
    }
}

/// The files behind `-f` values, in order: a file as given, `-` as is, a directory as its `.yaml`, `.yml`
/// and `.json` files sorted by name (not recursive, as kubectl without `-R`). A directory without any is
/// an error, as is `-` given twice (stdin can be read once).
pub(crate) fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stdin = false;
    for path in paths {
        if path.as_os_str() == "-" {
            if stdin {
                bail!("-f -: stdin can be read only once");
            }
            stdin = true;
            files.push(path.clone());
            continue;
        }
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        if !meta.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read directory {}", path.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| EXTENSIONS.contains(&e))
            })
            .collect();
        if found.is_empty() {
            bail!(
                "{}: the directory holds no .yaml, .yml or .json files",
                path.display()
            );
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// Reads a whole input file, or stdin for `-`.
pub(crate) fn read(path: &Path) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)
            .context("reading stdin")?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    }
}

/// A duration as kubectl and Go write them: one or more `<number><unit>` with units `ms`, `s`, `m`, `h`
/// (`500ms`, `30s`, `5m`, `1h30m`, `1.5h`), or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim();
    let fail = || {
        format!(
            "{text:?} is not a duration (use e.g. 30s, 5m, 1h30m or 500ms; a bare number is seconds)"
        )
    };
    if t.is_empty() {
        return Err(fail());
    }
    if let Ok(seconds) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| fail());
    }
    let mut rest = t;
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().map_err(|_| fail())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?} (use ms, s, m or h, e.g. 30s, 5m, 1h30m)"
                ));
            }
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    Duration::try_from_secs_f64(total).map_err(|_| fail())
}

/// [`parse_duration`] for flags kept as whole seconds: rounded up, so `500ms` waits a second, not zero.
pub(crate) fn parse_seconds(text: &str) -> std::result::Result<u64, String> {
    let duration = parse_duration(text)?;
    Ok(duration.as_secs() + u64::from(duration.subsec_nanos() > 0))
}

/// A duration for people: `850ms`, `12.5s`, `4m 05s`, `2h 03m`, `3d 04h`.
pub(crate) fn human_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    let s = duration.as_secs();
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{:.1}s", duration.as_secs_f64()),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// [`human_duration`] of milliseconds (negative ones read as zero).
pub(crate) fn human_ms(ms: f64) -> String {
    human_duration(Duration::from_secs_f64((ms / 1000.0).max(0.0)))
}

/// The width lines written to stdout should fit: `COLUMNS` when set (as `ls` and kubectl read it), else the
/// terminal's width when stdout is a terminal, else [`PIPED_WIDTH`] (a pipe or file has no width, and a
/// line of every metric ever reported is no use to `grep` or a CI log either).
pub(crate) fn output_width() -> usize {
    use std::io::IsTerminal;
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal().then(|| {
        rustix::termios::tcgetwinsize(&stdout)
            .ok()
            .map(|size| usize::from(size.ws_col))
            .filter(|&columns| columns > 0)
            .unwrap_or(80)
    });
    width_from(std::env::var("COLUMNS").ok().as_deref(), terminal)
}

/// `head`, then as many of `items` as fit in `width` characters (after `separator`, joined by spaces), with
/// `…` in place of those left out; cut and ended with `…` when not even `head` fits. Progress lines use it:
/// a report of a hundred metrics made 1,445-character lines.
pub(crate) fn fit_line(head: &str, separator: &str, items: &[String], width: usize) -> String {
    let render = |shown: &[String], more: bool| {
        let mut tail: Vec<&str> = shown.iter().map(String::as_str).collect();
        if more {
            tail.push("…");
        }
        let separator = if head.is_empty() || tail.is_empty() {
            ""
        } else {
            separator
        };
        format!("{head}{separator}{}", tail.join(" "))
    };
    let mut shown = items.len();
    let mut line = render(items, false);
    while shown > 0 && line.chars().count() > width {
        shown -= 1;
        line = render(&items[..shown], true);
    }
    if line.chars().count() > width {
        line = line.chars().take(width.saturating_sub(1)).collect();
        line.push('…');
    }
    line
}

/// The width of lines that go to a pipe or a file.
pub(crate) const PIPED_WIDTH: usize = 120;

/// [`output_width`] from `COLUMNS` and the terminal's width (`None`: not a terminal).
fn width_from(columns: Option<&str>, terminal: Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .or(terminal)
        .unwrap_or(PIPED_WIDTH)
}

/// Rows of text cells printed with every column as wide as its widest cell (3 spaces between columns, the
/// last column not padded), so long names never shift the columns after them.
#[derive(Debug, Default)]
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
    /// Columns aligned to the right (numbers).
    right: Vec<usize>,
}

impl Table {
    /// A table with this header row.
    pub(crate) fn new<S: ToString>(header: &[S]) -> Self {
        Self {
            rows: vec![header.iter().map(ToString::to_string).collect()],
            right: Vec::new(),
        }
    }

    /// Aligns these columns to the right.
    pub(crate) fn right_aligned(mut self, columns: &[usize]) -> Self {
        self.right = columns.to_vec();
        self
    }

    /// Adds a row.
    pub(crate) fn row<S: ToString>(&mut self, cells: &[S]) {
        self.rows
            .push(cells.iter().map(ToString::to_string).collect());
    }

    /// The table as text, one line per row.
    pub(crate) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("   ");
                }
                let last = c + 1 == row.len();
                if self.right.contains(&c) {
                    let _ = write!(line, "{cell:>width$}", width = widths[c]);
                } else if last {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<width$}", width = widths[c]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// One document read from an input, with the file it came from.
#[derive(Debug)]
pub(crate) struct SourcedDocument {
    /// The file's name as messages show it ([`display_name`]).
    pub(crate) source: String,
    /// The object.
    pub(crate) document: Document,
}

/// The documents of some files, read and checked as `kubetrain validate` checks them.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Documents of the `-f` inputs that could be read.
    pub(crate) documents: Vec<SourcedDocument>,
    /// Runtimes from the `-f` and `--runtime` inputs, then the built-in ones.
    pub(crate) catalog: RuntimeCatalog,
    /// Every finding, errors and warnings, in file order.
    pub(crate) findings: Vec<FieldError>,
    /// Inputs that are not YAML: `<file>: invalid YAML: <message>`.
    pub(crate) unreadable: Vec<String>,
}

impl Checked {
    /// Whether anything failed (an unreadable input or an error finding).
    pub(crate) fn failed(&self) -> bool {
        !self.unreadable.is_empty() || self.findings.iter().any(FieldError::is_error)
    }

    /// Prints what failed as `validate` does, to stderr: unreadable inputs, then every finding (warnings
    /// prefixed with `Warning:`).
    pub(crate) fn report(&self) {
        for line in &self.unreadable {
            eprintln!("{line}");
        }
        for finding in &self.findings {
            if finding.is_error() {
                eprintln!("{finding}");
            } else {
                eprintln!("Warning: {finding}");
            }
        }
    }
}

/// A training runtime that was given but could not be read: TrainJobs that use it are told so, instead of
/// being checked against nothing ("not found") or against a built-in runtime of the same name.
#[derive(Debug)]
pub(crate) struct BrokenRuntime {
    kind: String,
    /// The namespace of a TrainingRuntime; empty for a ClusterTrainingRuntime.
    namespace: String,
    name: String,
    source: String,
}

impl BrokenRuntime {
    /// The identity of a document that claims to be a training runtime, read from its raw value so that an
    /// invalid one is still known by name.
    pub(crate) fn of(value: &serde_json::Value, source: &str) -> Option<Self> {
        let kind = value.get("kind")?.as_str()?;
        let namespaced = kind == constants::TRAINING_RUNTIME_KIND;
        if !namespaced && kind != constants::CLUSTER_TRAINING_RUNTIME_KIND {
            return None;
        }
        let metadata = value.get("metadata")?;
        let name = metadata.get("name")?.as_str()?.to_owned();
        let namespace = if namespaced {
            metadata
                .get("namespace")
                .and_then(|n| n.as_str())
                .unwrap_or(kubetrain_api::catalog::DEFAULT_NAMESPACE)
                .to_owned()
        } else {
            String::new()
        };
        Some(Self {
            kind: kind.to_owned(),
            namespace,
            name,
            source: source.to_owned(),
        })
    }

    /// Whether this is the runtime `job` references.
    fn is_used_by(&self, job: &TrainJob) -> bool {
        let reference = &job.spec.runtime_ref;
        let kind = reference.kind_or_default();
        let namespace = if kind == constants::TRAINING_RUNTIME_KIND {
            job.metadata
                .namespace
                .as_deref()
                .unwrap_or(kubetrain_api::catalog::DEFAULT_NAMESPACE)
        } else {
            ""
        };
        self.kind == kind && self.namespace == namespace && self.name == reference.name
    }

    /// Whether this runtime would be shadowed by the built-in one named `name`.
    fn shadows_builtin(&self, name: &str) -> bool {
        self.kind == constants::CLUSTER_TRAINING_RUNTIME_KIND && self.name == name
    }
}

/// The finding for a TrainJob whose runtime is among `broken`: `spec.runtimeRef: ClusterTrainingRuntime
/// "x" of FILE is invalid (see its errors) ...`.
pub(crate) fn broken_runtime_finding(
    job: &TrainJob,
    broken: &[BrokenRuntime],
) -> Option<FieldError> {
    let runtime = broken.iter().find(|b| b.is_used_by(job))?;
    Some(
        FieldError::error(
            "spec.runtimeRef",
            format!(
                "{} {:?} of {} is invalid (see its errors); fix it and the TrainJob is checked against it",
                runtime.kind, runtime.name, runtime.source
            ),
        )
        .on(constants::TRAINJOB_KIND, job.name()),
    )
}

/// Reads `files` (already [`expand`]ed) and `runtimes` and checks every trainer document of `files`: each
/// document is read on its own, so one invalid document does not hide the others. A TrainJob whose runtime
/// was given but is invalid gets [`broken_runtime_finding`] instead of the webhook's misleading "not found".
pub(crate) fn check(files: &[PathBuf], runtimes: &[PathBuf]) -> Result<Checked> {
    let mut checked = Checked::default();
    let mut broken: Vec<BrokenRuntime> = Vec::new();
    let mut catalog = RuntimeCatalog::new();
    let inputs = files
        .iter()
        .map(|p| (p, true))
        .chain(runtimes.iter().map(|p| (p, false)));
    for (path, is_target) in inputs {
        let source = display_name(path);
        let text = read(path)?;
        let pieces = kubetrain_yaml::split_documents(&text)
            .into_iter()
            .filter(|(_, piece)| !piece.trim().is_empty());
        for (index, (line, piece)) in pieces.enumerate() {
            if piece.len() > kubetrain_yaml::MAX_DOCUMENT_BYTES {
                checked.unreadable.push(format!(
                    "{source}: {}",
                    kubetrain_yaml::document_too_large(index + 1, line, piece.len())
                ));
                continue;
            }
            // The fast reader for plain manifests, serde-saphyr for anything else (same value, same errors).
            let value: serde_json::Value = match kubetrain_yaml::fast::from_str(piece) {
                Ok(value) => value,
                Err(e) => {
                    checked.unreadable.push(format!(
                        "{source}: invalid YAML: document {} (from line {line}): {}",
                        index + 1,
                        kubetrain_yaml::yaml_error(&e, line)
                    ));
                    continue;
                }
            };
            if value.is_null() {
                continue;
            }
            let identity = BrokenRuntime::of(&value, &source);
            match kubetrain_api::parse_value(value, index) {
                Ok(document) => {
                    catalog.add_document(&document);
                    if is_target {
                        checked.documents.push(SourcedDocument {
                            source: source.clone(),
                            document,
                        });
                    }
                }
                Err(errors) => {
                    broken.extend(identity);
                    checked.findings.extend(errors);
                }
            }
        }
    }
    add_builtins(&mut catalog, &broken);
    for sourced in &checked.documents {
        let mut found = validate_document(&sourced.document, &catalog);
        if let Document::TrainJob(job) = &sourced.document
            && let Some(finding) = broken_runtime_finding(job, &broken)
        {
            // The lookup's "not found" (at spec.runtimeRef, or spec.runtimeRef.name offline) would mislead.
            found.retain(|f| !f.path.to_ascii_lowercase().starts_with("spec.runtimeref"));
            found.push(finding);
        }
        checked.findings.extend(found);
    }
    checked.catalog = catalog;
    Ok(checked)
}

/// Adds the built-in runtimes that no given runtime defines; one given but invalid is not replaced by the
/// built-in of its name.
pub(crate) fn add_builtins(catalog: &mut RuntimeCatalog, broken: &[BrokenRuntime]) {
    for runtime in kubetrain_jobset::builtin::runtimes() {
        if !broken.iter().any(|b| b.shadows_builtin(runtime.name())) {
            catalog.add_cluster_if_absent(runtime);
        }
    }
}

/// The TrainJob `kubetrain run` runs, and the runtimes it may use: `files` and `runtimes` are read and
/// checked as `validate` checks them (every finding of every document is printed, an invalid runtime is
/// reported as invalid), then the files must hold exactly one TrainJob. A second TrainJob is an error, not
/// run and not ignored: one `kubetrain run` is one job with one run directory, progress line and exit
/// status. `Err` carries the user-facing refusal.
pub(crate) fn trainjob_to_run(
    files: &[PathBuf],
    runtimes: &[PathBuf],
) -> Result<(TrainJob, RuntimeCatalog)> {
    let files = expand(files)?;
    let runtimes = expand(runtimes)?;
    let checked = check(&files, &runtimes)?;
    let names = || {
        files
            .iter()
            .map(|f| display_name(f))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if checked.failed() {
        checked.report();
        let errors =
            checked.findings.iter().filter(|f| f.is_error()).count() + checked.unreadable.len();
        bail!(
            "{}: {errors} error{} above; nothing was run (`kubetrain validate` shows the same)",
            names(),
            if errors == 1 { "" } else { "s" }
        );
    }
    // Warnings too, before anything else is printed: what `validate` would say comes first.
    checked.report();
    let jobs: Vec<(&TrainJob, &str)> = checked
        .documents
        .iter()
        .filter_map(|d| match &d.document {
            Document::TrainJob(job) => Some((&**job, d.source.as_str())),
            _ => None,
        })
        .collect();
    let job = match jobs.as_slice() {
        [(job, _)] => (*job).clone(),
        [] => {
            let found: Vec<String> = checked
                .documents
                .iter()
                .map(|d| format!("{}/{}", d.document.kind(), d.document.name()))
                .collect();
            let found = if found.is_empty() {
                "no documents".to_owned()
            } else {
                found.join(", ")
            };
            bail!(
                "{} holds no TrainJob (found: {found}); kubetrain run needs one: give the TrainJob with -f, \
                 and runtimes with -f or --runtime",
                names()
            );
        }
        several => {
            let listed: Vec<String> = several
                .iter()
                .map(|(job, source)| format!("{} in {source}", job.name()))
                .collect();
            bail!(
                "{} TrainJobs given ({}); kubetrain run runs one TrainJob per run: give each its own file",
                several.len(),
                listed.join(", ")
            );
        }
    };
    Ok((job, checked.catalog))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_writes_them() {
        let cases: [(&str, u64); 9] = [
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1h30m", 5_400_000),
            ("2m30s", 150_000),
            ("500ms", 500),
            ("1.5h", 5_400_000),
            ("90", 90_000),
            ("0.25", 250),
        ];
        for (text, ms) in cases {
            assert_eq!(
                parse_duration(text).map(|d| d.as_millis()),
                Ok(u128::from(ms)),
                "{text}"
            );
        }
        for bad in ["", "5 minutes", "m", "5d", "-3s", "1e999"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} is not a duration");
        }
        assert_eq!(parse_seconds("5m"), Ok(300));
        assert_eq!(parse_seconds("600"), Ok(600));
        assert_eq!(parse_seconds("1500ms"), Ok(2));
        assert_eq!(
            parse_duration("5d").unwrap_err(),
            "\"5d\": unknown unit \"d\" (use ms, s, m or h, e.g. 30s, 5m, 1h30m)"
        );
    }

    #[test]
    fn durations_print_for_people() {
        let cases = [
            (0, "0ms"),
            (850, "850ms"),
            (12_500, "12.5s"),
            (245_000, "4m 05s"),
            (7_380_000, "2h 03m"),
            (273_600_000, "3d 04h"),
        ];
        for (ms, text) in cases {
            assert_eq!(human_duration(Duration::from_millis(ms)), text);
        }
        assert_eq!(human_ms(-5.0), "0ms");
    }

    #[test]
    fn output_width_prefers_columns_then_the_terminal_then_120() {
        let cases: [(Option<&str>, Option<usize>, usize); 6] = [
            (Some("60"), Some(200), 60),
            (Some("60"), None, 60),
            (None, Some(200), 200),
            (None, None, PIPED_WIDTH),
            (Some("0"), None, PIPED_WIDTH),
            (Some("wide"), Some(90), 90),
        ];
        for (columns, terminal, width) in cases {
            assert_eq!(
                width_from(columns, terminal),
                width,
                "{columns:?} {terminal:?}"
            );
        }
    }

    #[test]
    fn tables_align_to_the_widest_cell() {
        let mut table = Table::new(&["NAME", "COUNT", "NOTE"]).right_aligned(&[1]);
        table.row(&["a-very-long-workload-name-indeed", "7", "x"]);
        table.row(&["b", "1234", ""]);
        assert_eq!(
            table.render(),
            "NAME                               COUNT   NOTE\n\
             a-very-long-workload-name-indeed       7   x\n\
             b                                   1234\n"
        );
    }

    #[test]
    fn directories_expand_to_their_manifests_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.yaml", "a.yml", "c.json", "notes.txt"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();
        let single = dir.path().join("b.yaml");
        let files = expand(&[dir.path().to_path_buf(), single.clone()]).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.yml", "b.yaml", "c.json", "b.yaml"]);

        let empty = tempfile::tempdir().unwrap();
        let err = expand(&[empty.path().to_path_buf()]).unwrap_err();
        assert!(
            err.to_string()
                .ends_with(": the directory holds no .yaml, .yml or .json files"),
            "{err}"
        );
        let err = expand(&["-".into(), "-".into()]).unwrap_err();
        assert_eq!(err.to_string(), "-f -: stdin can be read only once");
        let err = expand(&[dir.path().join("missing.yaml")]).unwrap_err();
        assert!(err.to_string().starts_with("cannot read "), "{err}");
    }
}
