//! The migration report: one line per v1 field, saying whether it was carried exactly, carried with a change,
//! or not carried (and what to do instead).

use std::fmt::Write as _;

use serde::Serialize;

/// What became of one v1 field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// The TrainJob or its runtime holds the same value with the same meaning.
    Exact,
    /// Carried, with a change the note explains (another name, place or value for the same behaviour).
    Changed,
    /// Not carried: a person must act; the note says what to do instead.
    NotCarried,
}

impl Outcome {
    /// The word the text report prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Exact => "exact",
            Outcome::Changed => "changed",
            Outcome::NotCarried => "NOT CARRIED",
        }
    }
}

/// One line of a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The v1 field path, e.g. `spec.runPolicy.backoffLimit`.
    pub path: String,
    /// What became of it.
    pub outcome: Outcome,
    /// Where it went and why, or what to do instead.
    pub note: String,
}

/// The report of one v1 job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationReport {
    /// The v1 job, `Kind/namespace/name`.
    pub source: String,
    /// The TrainJob made from it, `namespace/name`.
    pub trainjob: String,
    /// The runtime it references, `Kind/name`, and whether it is a built-in one.
    pub runtime: String,
    /// Whether [`MigrationReport::runtime`] is one of the built-in ClusterTrainingRuntimes.
    pub builtin_runtime: bool,
    /// One entry per field, in the order the converter met them.
    pub entries: Vec<Entry>,
}

impl MigrationReport {
    pub(crate) fn push(
        &mut self,
        path: impl Into<String>,
        outcome: Outcome,
        note: impl Into<String>,
    ) {
        self.entries.push(Entry {
            path: path.into(),
            outcome,
            note: note.into(),
        });
    }

    pub(crate) fn exact(&mut self, path: impl Into<String>, note: impl Into<String>) {
        self.push(path, Outcome::Exact, note);
    }

    pub(crate) fn changed(&mut self, path: impl Into<String>, note: impl Into<String>) {
        self.push(path, Outcome::Changed, note);
    }

    pub(crate) fn not_carried(&mut self, path: impl Into<String>, note: impl Into<String>) {
        self.push(path, Outcome::NotCarried, note);
    }

    /// Whether a person must act: some field was not carried.
    pub fn needs_person(&self) -> bool {
        self.entries
            .iter()
            .any(|e| e.outcome == Outcome::NotCarried)
    }

    /// How many entries have `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.entries.iter().filter(|e| e.outcome == outcome).count()
    }

    /// The text form: a header line, then one line per entry (`  changed      path: note`).
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "{} -> TrainJob {} (runtime {}{}): {} exact, {} changed, {} not carried\n",
            self.source,
            self.trainjob,
            self.runtime,
            if self.builtin_runtime {
                ", built-in"
            } else {
                ""
            },
            self.count(Outcome::Exact),
            self.count(Outcome::Changed),
            self.count(Outcome::NotCarried),
        );
        for e in &self.entries {
            let _ = writeln!(text, "  {:<11}  {}: {}", e.outcome.as_str(), e.path, e.note);
        }
        text
    }
}
