//! `kubetrain optimize --local`: a small real search (train-demo's loss against learning rate and batch
//! size, the example in examples/optimize/ cut down), its report (`optimization.json`, and
//! `optimization.html` checked in headless Chromium when there is one), and the refusals.

use std::path::Path;
use std::process::Command;

use crate::common::{arg, example, kubetrain, text, write};

/// The example search with fewer, shorter trials.
fn small_sweep(algorithm_note: &str, trials: u32) -> String {
    let yaml = std::fs::read_to_string(example("optimize/train-demo-sweep.yaml")).unwrap();
    let yaml = yaml
        .replace("numTrials: 16", &format!("numTrials: {trials}"))
        .replace("--steps 30 --step-delay-ms 200", "--steps 8")
        .replace("kubetrain.dev/search-algorithm: tpe", algorithm_note);
    assert!(
        yaml.contains(&format!("numTrials: {trials}")) && yaml.contains("--steps 8"),
        "the example changed"
    );
    yaml
}

#[test]
fn a_local_search_runs_its_trials_and_writes_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "sweep.yaml",
        &small_sweep("kubetrain.dev/search-algorithm: tpe", 4),
    );
    let out = dir.path().join("report");
    let run = kubetrain(
        &["optimize", "--local", "-f", arg(&file), "--out", arg(&out)],
        None,
    );
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("optimizing train-demo-sweep locally: 4 trials (tpe), 2 at once"),
        "{stdout}"
    );
    assert!(stdout.contains("best: train-demo-sweep-"), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("optimization.json")).unwrap())
            .unwrap();
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 4, "{report:#}");
    let mut best = f64::INFINITY;
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(t["name"], format!("train-demo-sweep-{i}"));
        assert_eq!(t["state"], "Succeeded", "{t:#}");
        let lr: f64 = t["parameters"]["lr"].as_str().unwrap().parse().unwrap();
        assert!((0.003..=1.5).contains(&lr), "{t:#}");
        let batch = t["parameters"]["batch_size"].as_str().unwrap();
        assert!(["64", "256", "1024", "4096"].contains(&batch), "{t:#}");
        best = best.min(t["objective"].as_f64().unwrap());
    }
    assert_eq!(
        report["best"]["objective"].as_f64().unwrap(),
        best,
        "{report:#}"
    );
    assert!(
        report["best"]["name"]
            .as_str()
            .unwrap()
            .starts_with("train-demo-sweep-")
    );
    // Each trial ran as a local run, its directory under the report's.
    assert!(out.join("trials/train-demo-sweep-0").is_dir());
    check_html(&out.join("optimization.html"));

    // The directory is ours now: a second search writes into it again, its trials into a fresh directory.
    let again = kubetrain(
        &["optimize", "--local", "-f", arg(&file), "--out", arg(&out)],
        None,
    );
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(out.join("trials-2/train-demo-sweep-0").is_dir());
}

#[test]
fn a_grid_search_covers_its_grid_once() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = small_sweep("kubetrain.dev/note: grid", 50)
        .replace("random:\n      seed: 42", "grid: {}")
        .replace(
            "logUniform: {min: \"0.003\", max: \"1.5\"}",
            "categorical: {choices: [\"0.1\", \"0.3\"]}",
        )
        .replace(
            "[\"64\", \"256\", \"1024\", \"4096\"]",
            "[\"256\", \"1024\"]",
        );
    let file = write(dir.path(), "grid.yaml", &yaml);
    let out = dir.path().join("grid");
    let run = kubetrain(
        &["optimize", "--local", "-f", arg(&file), "--out", arg(&out)],
        None,
    );
    assert!(
        run.status.success(),
        "{}\n{}",
        text(&run.stdout),
        text(&run.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("optimization.json")).unwrap())
            .unwrap();
    let mut points: Vec<String> = report["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{}/{}",
                t["parameters"]["lr"], t["parameters"]["batch_size"]
            )
        })
        .collect();
    points.sort();
    assert_eq!(
        points,
        [
            "\"0.1\"/\"1024\"",
            "\"0.1\"/\"256\"",
            "\"0.3\"/\"1024\"",
            "\"0.3\"/\"256\""
        ]
    );
}

#[test]
fn a_non_empty_out_it_did_not_create_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "sweep.yaml",
        &small_sweep("kubetrain.dev/search-algorithm: tpe", 2),
    );
    let out = dir.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    write(&out, "notes.txt", "keep me");
    let run = kubetrain(
        &["optimize", "--local", "-f", arg(&file), "--out", arg(&out)],
        None,
    );
    assert!(!run.status.success());
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("is not empty and kubetrain optimize did not create it"),
        "{stderr}"
    );
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["notes.txt"]);
}

#[test]
fn a_bad_search_is_refused_with_field_paths_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = small_sweep("kubetrain.dev/search-algorithm: tpe", 2)
        .replace("min: \"0.003\"", "min: \"0\"");
    let file = write(dir.path(), "bad.yaml", &yaml);
    let out = dir.path().join("out");
    let run = kubetrain(
        &["optimize", "--local", "-f", arg(&file), "--out", arg(&out)],
        None,
    );
    assert!(!run.status.success());
    let stderr = text(&run.stderr);
    assert!(stderr.contains("spec.parameters[0]"), "{stderr}");
    assert!(!out.exists(), "nothing created for an invalid search");
    let unknown = small_sweep("kubetrain.dev/search-algorithm: bayes", 2);
    let file = write(dir.path(), "unknown.yaml", &unknown);
    let run = kubetrain(
        &["optimize", "--local", "-f", arg(&file), "--out", arg(&out)],
        None,
    );
    assert!(!run.status.success());
    assert!(
        text(&run.stderr).contains("kubetrain.dev/search-algorithm"),
        "{}",
        text(&run.stderr)
    );
}

/// The page is self-contained, and laid out in headless Chromium (when there is one) every chart spans the
/// content width and drew its points.
fn check_html(html: &Path) {
    let page = std::fs::read_to_string(html).unwrap();
    assert!(!page.contains("<script") && !page.contains("http://") && !page.contains("https://"));
    for id in [
        "chart-objective",
        "chart-param-lr",
        "chart-param-batch-size",
        "id=\"trials\"",
    ] {
        assert!(page.contains(id), "{id} missing");
    }
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    let Some(chromium) = chromium else {
        eprintln!("!!! chromium not found: optimization.html was NOT checked in a browser");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let copy = write(
        work.path(),
        "checked.html",
        &page.replace("</body>", &format!("<script>{CHECK}</script></body>")),
    );
    let dom = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
        ])
        .args(["--dump-dom", "--window-size=1000,900"])
        .arg(format!(
            "--user-data-dir={}",
            work.path().join("profile").display()
        ))
        .arg(format!("file://{}", copy.display()))
        .output()
        .expect("chromium runs");
    let dom = text(&dom.stdout);
    let report = dom
        .split("<pre id=\"check\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!("the check did not run: {dom}");
        });
    assert!(report.contains("charts=3"), "{report}");
    assert!(!report.contains("problem"), "{report}");
}

/// Counts the charts and each chart's points; flags a chart narrower than the content or a page wider than
/// the window.
const CHECK: &str = r#"
window.addEventListener('load', function () {
  var lines = [], charts = document.querySelectorAll('svg.chart'), body = document.body, cs = getComputedStyle(body);
  var content = body.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  if (document.documentElement.scrollWidth > document.documentElement.clientWidth + 1) lines.push('problem: page too wide');
  lines.push('charts=' + charts.length);
  charts.forEach(function (svg) {
    var n = svg.querySelectorAll('circle').length;
    if (n === 0) lines.push('problem: ' + svg.id + ' has no points');
    if (svg.getBoundingClientRect().width < content - 2) lines.push('problem: ' + svg.id + ' is narrow');
  });
  var pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = lines.join(' '); body.appendChild(pre);
});
"#;
