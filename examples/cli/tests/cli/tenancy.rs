//! `kubetrain tenancy add-team | check` as a user runs them: add-team's YAML against its golden file and its
//! field-named refusals; check on the fake API server holding what add-team prints (exit 0), the same
//! without the quota (exit 1, the fix printed), JSON and the HTML page (checked in headless Chromium), an
//! unreachable cluster (exit 2); add-team --apply creating every object.

use std::path::Path;
use std::process::{Command, Output};

use kubetrain_test_support::{FakeApiServer, ServedApi};
use serde_json::Value;

use crate::common::{arg, command, kubetrain, text};

/// The flags of the golden file's team.
const VISION: &[&str] = &[
    "tenancy",
    "add-team",
    "vision",
    "--gpus",
    "16",
    "--cpu",
    "128",
    "--memory",
    "1Ti",
    "--storage",
    "10Ti",
    "--group",
    "oidc:vision",
    "--group",
    "oidc:vision-admins",
    "--cohort",
    "gpu-teams",
    "--dataset-cidr",
    "10.20.0.0/16",
];

fn golden_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/testdata/tenancy-add-team-vision.yaml")
}

/// add-team's output for [`VISION`].
fn vision_yaml() -> String {
    let out = kubetrain(VISION, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The documents of a YAML stream.
fn documents(yaml: &str) -> Vec<Value> {
    yaml.split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).unwrap())
        .collect()
}

#[test]
fn add_team_prints_the_golden_objects() {
    let yaml = vision_yaml();
    let golden = golden_path();
    if std::env::var_os("KUBETRAIN_BLESS").is_some() {
        std::fs::write(&golden, &yaml).unwrap();
    }
    let want = std::fs::read_to_string(&golden).expect("golden file (KUBETRAIN_BLESS=1 writes it)");
    assert_eq!(
        yaml,
        want,
        "add-team output changed; KUBETRAIN_BLESS=1 rewrites {}",
        golden.display()
    );
    let kinds: Vec<String> = documents(&yaml)
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds.len(), 12, "{kinds:?}");
}

#[test]
fn add_team_names_every_bad_flag() {
    let out = kubetrain(
        &[
            "tenancy",
            "add-team",
            "Vision",
            "--memory",
            "lots",
            "--storage",
            "1TB",
            "--dataset-cidr",
            "10.0.0.1",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: NAME: \"Vision\" is not a DNS label"),
        "{err}"
    );
    assert!(err.contains("e.g. \"vision\""), "{err}");
    assert!(
        err.contains("\n--memory: \"lots\" is not a quantity"),
        "{err}"
    );
    assert!(
        err.contains("\n--storage: \"1TB\" is not a quantity"),
        "{err}"
    );
    assert!(
        err.contains("\n--dataset-cidr: \"10.0.0.1\" is not a CIDR"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// A fake API server served on loopback, a kubeconfig naming it, and `kubetrain` runs against it: the
/// server answers on the runtime's workers while each command runs on this thread.
struct Cluster {
    server: FakeApiServer,
    _served: ServedApi,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

impl Cluster {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (server, served) = {
            let _in_runtime = runtime.enter();
            let server = FakeApiServer::start();
            let served = server.serve().unwrap();
            (server, served)
        };
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        served.write_kubeconfig(&kubeconfig, "default").unwrap();
        Cluster {
            server,
            _served: served,
            kubeconfig,
            _dir: dir,
            _runtime: runtime,
        }
    }

    fn kubetrain(&self, args: &[&str]) -> Output {
        command()
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .output()
            .expect("kubetrain runs")
    }
}

/// `add-team vision --apply` on `cluster`: every object created, in order.
fn apply_vision(cluster: &Cluster) {
    let apply: Vec<&str> = VISION.iter().copied().chain(["--apply"]).collect();
    let out = cluster.kubetrain(&apply);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 12, "{stdout}");
    assert!(lines.iter().all(|l| l.ends_with(" created")), "{stdout}");
    assert_eq!(lines[2], "Namespace vision created");
    assert_eq!(lines[9], "LocalQueue vision/default created");
    let cq = cluster
        .server
        .get("kueue.x-k8s.io/v1beta2", "clusterqueues", "", "vision")
        .expect("ClusterQueue stored");
    assert_eq!(cq["spec"]["cohortName"], "gpu-teams");
}

#[test]
fn add_team_apply_then_check_passes_and_fails_without_the_quota() {
    let cluster = Cluster::start();
    apply_vision(&cluster);
    // A kubeadm-style API server: its flags are read from its pod.
    cluster.server.insert(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kube-apiserver-cp", "namespace": "kube-system", "labels": {"component": "kube-apiserver"}},
        "spec": {"containers": [{"name": "kube-apiserver", "command": [
            "kube-apiserver", "--audit-policy-file=/etc/kubernetes/audit.yaml",
            "--audit-log-path", "/var/log/kubernetes/audit.log"]}]},
    }));
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let out = cluster.kubetrain(&["tenancy", "check", "-o", "json", "--html", arg(&html)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let report: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(report["teamNamespaces"], serde_json::json!(["vision"]));
    let items = report["items"].as_array().unwrap();
    let ids: Vec<&str> = items.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "team-namespaces",
            "rbac-groups",
            "quotas",
            "pod-security",
            "runtimes",
            "image-policy",
            "network-policies",
            "audit",
            "secrets",
            "cleanup"
        ]
    );
    for id in ["team-namespaces", "rbac-groups", "quotas", "pod-security"] {
        let item = items.iter().find(|i| i["id"] == id).unwrap();
        assert_eq!(item["verdict"], "pass", "{item}");
    }
    let network = items
        .iter()
        .find(|i| i["id"] == "network-policies")
        .unwrap();
    assert!(
        network["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "vision: dataset endpoints allowed out: 10.20.0.0/16"),
        "{network}"
    );
    let evidence = |id: &str| -> Vec<String> {
        let item = items.iter().find(|i| i["id"] == id).unwrap();
        item["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        evidence("audit"),
        [
            "pod kube-system/kube-apiserver-cp: audit log at /var/log/kubernetes/audit.log",
            "the audit policy: unknown, because it is a file on the control plane (the API server reads /etc/kubernetes/audit.yaml), not an API object",
        ]
    );
    assert!(evidence("secrets").contains(
        &"pod kube-system/kube-apiserver-cp: no --encryption-provider-config, Secrets are stored unencrypted in etcd".to_owned()
    ));
    check_html_in_chromium(&html, report["verdict"].as_str().unwrap());

    assert!(
        cluster
            .server
            .remove("v1", "resourcequotas", "vision", "kubetrain-team")
    );
    let out = cluster.kubetrain(&["tenancy", "check", "--html", arg(&html)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("FAIL  quotas"), "{stdout}");
    assert!(
        stdout.contains("      - vision: no ResourceQuota\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("      fix: kubetrain tenancy add-team vision --gpus N --cpu Q --memory Q --storage Q --apply"),
        "{stdout}"
    );
    assert!(
        stdout.lines().last().unwrap().starts_with("FAIL: "),
        "{stdout}"
    );
    check_html_in_chromium(&html, "fail");
}

#[test]
fn check_of_an_unreachable_cluster_exits_2() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let out = command()
        .args(["tenancy", "check", "--kubeconfig", arg(&kubeconfig)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "error: cannot read the cluster at http://127.0.0.1:{port}: "
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    let out = command()
        .args([
            "tenancy",
            "check",
            "--kubeconfig",
            arg(&dir.path().join("missing")),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .starts_with("error: cannot use the cluster configuration: reading kubeconfig ")
    );
}

/// Checks the page in headless Chromium: laid out no wider than the window at 1280 and 760 px, the verdict
/// banner showing `verdict`, one row per item. Without Chromium it says so loudly and passes, except under CI.
fn check_html_in_chromium(html: &Path, verdict: &str) {
    let page = std::fs::read_to_string(html).unwrap();
    // The cluster's URL is in the page as text; nothing is loaded from anywhere.
    for loads in ["src=", "href=", "url(", "@import"] {
        assert!(!page.contains(loads), "the page loads nothing ({loads})");
    }
    assert!(!page.contains("<script"), "the report has no script");
    let Some(chromium) = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file())
    else {
        let msg = "!!! chromium not found (/usr/bin/chromium, /usr/bin/chromium-browser): the tenancy report was NOT checked in a browser (apt-get install chromium)";
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("{msg}");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let copy = work.path().join("checked.html");
    std::fs::write(
        &copy,
        page.replace(
            "</body>",
            &format!("<script>{LAYOUT_CHECK}</script></body>"),
        ),
    )
    .unwrap();
    for width in [1280, 760] {
        let out = Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--dump-dom",
            ])
            .arg(format!("--window-size={width},900"))
            .arg(format!(
                "--user-data-dir={}",
                work.path().join("profile").display()
            ))
            .arg(format!("file://{}", copy.display()))
            .output()
            .expect("chromium runs");
        let dom = text(&out.stdout);
        let report = dom
            .split("<pre id=\"layout-check\">")
            .nth(1)
            .and_then(|r| r.split("</pre>").next())
            .unwrap_or_else(|| {
                panic!(
                    "the layout check did not run at {width} px: {dom}{}",
                    text(&out.stderr)
                )
            });
        assert!(report.starts_with("rows=10 "), "{report}");
        assert!(report.contains(&format!("verdict={verdict}")), "{report}");
        assert!(!report.contains("problem:"), "at {width} px:\n{report}");
    }
}

/// Once laid out: the page is no wider than the window, the table fits the body, each row is visible.
/// Writes `rows=N verdict=V` and one `problem: …` line per fault into `<pre id="layout-check">`.
const LAYOUT_CHECK: &str = r#"
window.addEventListener('load', function () {
  var lines = [], doc = document.documentElement, rows = document.querySelectorAll('tbody tr');
  if (doc.scrollWidth > doc.clientWidth + 1) {
    lines.push('problem: the page is ' + doc.scrollWidth + ' px wide in a ' + doc.clientWidth + ' px window');
  }
  var table = document.querySelector('table').getBoundingClientRect();
  if (table.right > document.body.getBoundingClientRect().right + 1) { lines.push('problem: the table overflows'); }
  rows.forEach(function (r) {
    if (r.getBoundingClientRect().height < 10) { lines.push('problem: row ' + r.id + ' is not visible'); }
  });
  var verdict = document.getElementById('verdict').textContent.trim().toLowerCase();
  var pre = document.createElement('pre');
  pre.id = 'layout-check';
  pre.textContent = 'rows=' + rows.length + ' verdict=' + verdict + '\n' + lines.join('\n');
  document.body.appendChild(pre);
});
"#;
