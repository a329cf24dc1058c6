//! `kubetrain tenancy check | add-team`: the GPU-cluster guide's multi-tenancy checklist on a live cluster,
//! and a team's objects (printed, or applied with server-side apply). The judging and the objects are
//! [`kubetrain_tenancy::check`] and [`kubetrain_tenancy::team`]; this module reads the cluster and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Namespace, Pod, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubetrain_tenancy::check::{
    self, ApiServerArgs, AuditPolicySource, ClusterView, TRAINING_POLICY_CONFIGMAP,
};
use kubetrain_tenancy::team::{self, TeamObject, TeamSpec};
use serde_json::Value;

/// `kubetrain tenancy` arguments.
#[derive(Debug, Args)]
pub(crate) struct TenancyArgs {
    #[command(subcommand)]
    command: TenancyCommand,
}

#[derive(Debug, Subcommand)]
enum TenancyCommand {
    /// Judge the cluster against the GPU-cluster guide's checklist: pass / warn / fail per item, with the
    /// evidence and the fix (exit 1 when an item fails, 2 when the cluster cannot be read).
    Check(CheckArgs),
    /// Print (or, with --apply, apply) what a team needs: Namespace with Pod Security labels, RBAC for its
    /// group, ResourceQuota and LimitRange, Kueue ClusterQueue and LocalQueue, NetworkPolicies.
    AddTeam(AddTeamArgs),
}

/// Where to connect.
#[derive(Debug, Args)]
struct Target {
    /// The kubeconfig file (default: `KUBECONFIG`, else `~/.kube/config`, else the in-cluster config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: the current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// One block per item, for a terminal.
    Text,
    /// The report as JSON (docs/tenancy.md, "JSON").
    Json,
}

#[derive(Debug, Args)]
struct CheckArgs {
    #[command(flatten)]
    target: Target,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Output,
    /// Also write the report as a self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// The API server's audit policy file (`--audit-policy-file`), to judge what it logs: a file on the
    /// control plane is not readable through the API.
    #[arg(long, value_name = "FILE")]
    audit_policy: Option<PathBuf>,
    /// Judge only these team namespaces (repeatable; default: every namespace labelled kubetrain.dev/team
    /// or holding a LocalQueue).
    #[arg(short = 'n', long = "namespace", value_name = "NS")]
    namespaces: Vec<String>,
}

#[derive(Debug, Args)]
struct AddTeamArgs {
    /// The team: its namespace and ClusterQueue (a DNS label).
    name: String,
    /// GPUs (nvidia.com/gpu) the team may request in total.
    #[arg(long, value_name = "N", default_value_t = 8)]
    gpus: u32,
    /// CPU the team may request in total.
    #[arg(long, value_name = "Q", default_value = "96")]
    cpu: String,
    /// Memory the team may request in total.
    #[arg(long, value_name = "Q", default_value = "768Gi")]
    memory: String,
    /// Persistent volume storage the team may request in total.
    #[arg(long, value_name = "Q", default_value = "1Ti")]
    storage: String,
    /// The identity provider's group given access (repeatable; default: the team's name).
    #[arg(long = "group", value_name = "G")]
    groups: Vec<String>,
    /// The Kueue cohort of the team's ClusterQueue (teams of a cohort borrow each other's idle quota).
    #[arg(long, value_name = "C")]
    cohort: Option<String>,
    /// The Kueue ResourceFlavor of the team's quota (created when missing).
    #[arg(long, value_name = "NAME", default_value = "default-flavor")]
    flavor: String,
    /// A dataset endpoint's CIDR the team's pods may reach (repeatable).
    #[arg(long = "dataset-cidr", value_name = "CIDR")]
    dataset_cidrs: Vec<String>,
    /// The namespace of the kubetrain operator (its status server, port 10443, is allowed out).
    #[arg(long, value_name = "NS", default_value = "kubeflow-system")]
    operator_namespace: String,
    /// The Pod Security level enforced in the namespace.
    #[arg(long, value_name = "LEVEL", default_value = "baseline", value_parser = ["baseline", "restricted"])]
    pod_security: String,
    /// Apply the objects (server-side apply, idempotent) instead of printing them.
    #[arg(long)]
    apply: bool,
    #[command(flatten)]
    target: Target,
}

/// The exit code of an error reaching the cluster.
const CLUSTER_ERROR: u8 = 2;

/// Runs `kubetrain tenancy`.
pub(crate) fn run(args: TenancyArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match args.command {
        TenancyCommand::Check(a) => runtime.block_on(run_check(a)),
        TenancyCommand::AddTeam(a) => {
            let spec = TeamSpec {
                name: a.name.clone(),
                gpus: a.gpus,
                cpu: a.cpu.clone(),
                memory: a.memory.clone(),
                storage: a.storage.clone(),
                groups: a.groups.clone(),
                cohort: a.cohort.clone(),
                flavor: a.flavor.clone(),
                operator_namespace: a.operator_namespace.clone(),
                dataset_cidrs: a.dataset_cidrs.clone(),
                pod_security: a.pod_security.clone(),
            };
            let objects = team::team_objects(&spec).map_err(|e| anyhow::anyhow!("{e}"))?;
            if a.apply {
                runtime.block_on(apply(&a.target, &objects))
            } else {
                print!("{}", to_yaml_stream(&objects)?);
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

/// The objects as one YAML stream, documents separated by `---`.
fn to_yaml_stream(objects: &[TeamObject]) -> Result<String> {
    let mut out = String::new();
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&kubetrain_api::to_yaml(&object.value).context("writing YAML")?);
    }
    Ok(out)
}

/// A failure to talk to the cluster: printed, and exit code 2.
fn cluster_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(CLUSTER_ERROR)
}

/// A client for `target`, and the API server's URL.
async fn client(target: &Target) -> Result<(kube::Client, String), String> {
    let config = if target.kubeconfig.is_none() && target.context.is_none() {
        kube::Config::infer().await.map_err(|e| e.to_string())?
    } else {
        let kubeconfig = match &target.kubeconfig {
            Some(path) => Kubeconfig::read_from(path)
                .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?,
            None => Kubeconfig::read().map_err(|e| format!("reading kubeconfig: {e}"))?,
        };
        let options = KubeConfigOptions {
            context: target.context.clone(),
            ..Default::default()
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| e.to_string())?
    };
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_owned();
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    Ok((client, url))
}

async fn run_check(a: CheckArgs) -> Result<ExitCode> {
    let audit_policy = match &a.audit_policy {
        Some(path) => Some(read_audit_policy(path)?),
        None => None,
    };
    let (client, url) = match client(&a.target).await {
        Ok(c) => c,
        Err(e) => {
            return Ok(cluster_error(format!(
                "cannot use the cluster configuration: {e}"
            )));
        }
    };
    let mut view = match read_view(&client).await {
        Ok(view) => view,
        Err(e) => {
            return Ok(cluster_error(format!(
                "cannot read the cluster at {url}: {e}"
            )));
        }
    };
    view.audit_policy = audit_policy;
    let report = if a.namespaces.is_empty() {
        check::check(&view)
    } else {
        check::check_namespaces(&view, a.namespaces.iter().cloned().collect::<BTreeSet<_>>())
    };
    match a.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if let Some(path) = &a.html {
        std::fs::write(path, report.to_html(&url))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::from(report.exit_code()))
}

fn read_audit_policy(path: &Path) -> Result<AuditPolicySource> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let policy: Value = serde_saphyr::from_str(&text)
        .with_context(|| format!("{}: not a YAML audit policy", path.display()))?;
    if policy.get("kind").and_then(Value::as_str) != Some("Policy") {
        anyhow::bail!(
            "{}: kind: not an audit policy (want apiVersion: audit.k8s.io/v1, kind: Policy)",
            path.display()
        );
    }
    Ok(AuditPolicySource {
        source: path.display().to_string(),
        policy,
    })
}

/// What one list call gave: the objects, or an API refusal (recorded as unreadable); a transport error is
/// the `Err` that stops the check.
async fn list_typed<K>(
    client: &kube::Client,
    kind: &str,
    view: &mut ClusterView,
) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    refused(
        api.list(&ListParams::default()).await.map(|l| l.items),
        kind,
        view,
    )
}

fn refused<T>(
    result: Result<Vec<T>, kube::Error>,
    kind: &str,
    view: &mut ClusterView,
) -> Result<Vec<T>, kube::Error> {
    match result {
        Ok(items) => Ok(items),
        Err(kube::Error::Api(status)) => {
            let why = match status.code {
                403 => format!(
                    "listing them is forbidden for this user ({})",
                    status.message
                ),
                404 => "the API server does not serve them (the API is not installed)".to_owned(),
                code => format!("the API server answered {code}: {}", status.message),
            };
            view.unreadable.insert(kind.to_owned(), why);
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// A dynamic list of `group/version` `plural`, each object raw with its `kind`.
async fn list_raw(
    client: &kube::Client,
    (group, version, kind, plural): (&str, &str, &str, &str),
    view: &mut ClusterView,
) -> Result<Vec<Value>, kube::Error> {
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let resource = ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: api_version.clone(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let items = refused(
        api.list(&ListParams::default()).await.map(|l| l.items),
        kind,
        view,
    )?;
    Ok(items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .map(|mut v| {
            v["kind"] = Value::String(kind.to_owned());
            v["apiVersion"] = Value::String(api_version.clone());
            v
        })
        .collect())
}

const TRAINER: &str = "trainer.kubeflow.org";
const KUEUE: &str = "kueue.x-k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";

/// Reads everything the checklist looks at.
async fn read_view(client: &kube::Client) -> Result<ClusterView, kube::Error> {
    let mut view = ClusterView::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    view.namespaces = refused(
        namespaces
            .list(&ListParams::default())
            .await
            .map(|l| l.items),
        "Namespace",
        &mut view,
    )?;
    view.role_bindings = list_typed::<RoleBinding>(client, "RoleBinding", &mut view).await?;
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    view.cluster_role_bindings = refused(
        crbs.list(&ListParams::default()).await.map(|l| l.items),
        "ClusterRoleBinding",
        &mut view,
    )?;
    view.resource_quotas = list_typed::<ResourceQuota>(client, "ResourceQuota", &mut view).await?;
    view.limit_ranges = list_typed::<LimitRange>(client, "LimitRange", &mut view).await?;
    view.network_policies = list_typed::<NetworkPolicy>(client, "NetworkPolicy", &mut view).await?;
    read_custom(client, &mut view).await?;
    view.api_server = api_server_args(client).await?;
    Ok(view)
}

/// The custom resources (Kueue, Trainer), the training policy and the admission configurations.
async fn read_custom(client: &kube::Client, view: &mut ClusterView) -> Result<(), kube::Error> {
    view.local_queues = list_raw(
        client,
        (KUEUE, "v1beta2", "LocalQueue", "localqueues"),
        view,
    )
    .await?;
    view.cluster_queues = list_raw(
        client,
        (KUEUE, "v1beta2", "ClusterQueue", "clusterqueues"),
        view,
    )
    .await?;
    let mut runtimes = list_raw(
        client,
        (
            TRAINER,
            "v1alpha1",
            "ClusterTrainingRuntime",
            "clustertrainingruntimes",
        ),
        view,
    )
    .await?;
    runtimes.extend(
        list_raw(
            client,
            (TRAINER, "v1alpha1", "TrainingRuntime", "trainingruntimes"),
            view,
        )
        .await?,
    );
    view.runtimes = runtimes;
    view.train_jobs =
        list_raw(client, (TRAINER, "v1alpha1", "TrainJob", "trainjobs"), view).await?;
    let configmaps: Api<ConfigMap> = Api::all(client.clone());
    let by_name =
        ListParams::default().fields(&format!("metadata.name={TRAINING_POLICY_CONFIGMAP}"));
    let listed = refused(
        configmaps.list(&by_name).await.map(|l| l.items),
        "ConfigMap",
        view,
    )?;
    // Filtered here too: a server that ignores field selectors returns every ConfigMap.
    view.training_policies = listed
        .into_iter()
        .filter(|cm| cm.metadata.name.as_deref() == Some(TRAINING_POLICY_CONFIGMAP))
        .collect();
    view.admission_policies = list_raw(
        client,
        (
            ADMISSION,
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
        ),
        view,
    )
    .await?;
    let mut hooks = list_raw(
        client,
        (
            ADMISSION,
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
        view,
    )
    .await?;
    hooks.extend(
        list_raw(
            client,
            (
                ADMISSION,
                "v1",
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
            ),
            view,
        )
        .await?,
    );
    view.webhook_configurations = hooks;
    Ok(())
}

/// The API server's flags from its static pod (`component=kube-apiserver` in kube-system), where it is one.
async fn api_server_args(client: &kube::Client) -> Result<ApiServerArgs, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let listed = pods
        .list(&ListParams::default().labels("component=kube-apiserver"))
        .await;
    let pods = match listed {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) => {
            return Ok(ApiServerArgs::Unknown {
                reason: format!(
                    "listing pods in kube-system failed ({}: {})",
                    status.code, status.message
                ),
            });
        }
        Err(e) => return Err(e),
    };
    let found = pods.iter().find_map(|pod| {
        let container = pod.spec.as_ref()?.containers.first()?;
        let mut args: Vec<String> = container.command.clone().unwrap_or_default();
        args.extend(container.args.clone().unwrap_or_default());
        Some(ApiServerArgs::Read {
            source: format!(
                "pod kube-system/{}",
                pod.metadata.name.as_deref().unwrap_or("?")
            ),
            args,
        })
    });
    Ok(found.unwrap_or_else(|| ApiServerArgs::Unknown {
        reason: "no kube-apiserver pod in kube-system (the API server runs outside the cluster: a managed control plane or a host process)".to_owned(),
    }))
}

/// `add-team --apply`: each object with server-side apply, in order, printing `created`, `configured` or
/// `unchanged`.
async fn apply(target: &Target, objects: &[TeamObject]) -> Result<ExitCode> {
    let (client, url) = match client(target).await {
        Ok(c) => c,
        Err(e) => {
            return Ok(cluster_error(format!(
                "cannot use the cluster configuration: {e}"
            )));
        }
    };
    let params = PatchParams::apply(team::FIELD_MANAGER);
    for object in objects {
        let (group, version) = match object.api_version().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", object.api_version()),
        };
        let resource = ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: object.api_version().to_owned(),
            kind: object.kind().to_owned(),
            plural: object.plural.to_owned(),
        };
        let api: Api<DynamicObject> = match object.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let label = format!("{} {}", object.kind(), qualified(object));
        let before = match api.get_opt(object.name()).await {
            Ok(found) => found.and_then(|o| o.metadata.resource_version),
            Err(kube::Error::Api(status)) => {
                anyhow::bail!(
                    "{label}: {}",
                    api_message(&resource, status.code, &status.message)
                )
            }
            Err(e) => return Ok(cluster_error(format!("cannot reach {url}: {e}"))),
        };
        let applied = match api
            .patch(object.name(), &params, &Patch::Apply(&object.value))
            .await
        {
            Ok(applied) => applied,
            Err(kube::Error::Api(status)) => {
                anyhow::bail!(
                    "{label}: {}",
                    api_message(&resource, status.code, &status.message)
                )
            }
            Err(e) => return Ok(cluster_error(format!("cannot reach {url}: {e}"))),
        };
        let outcome = match before {
            None => "created",
            Some(rv) if Some(&rv) == applied.metadata.resource_version.as_ref() => "unchanged",
            Some(_) => "configured",
        };
        println!("{label} {outcome}");
    }
    Ok(ExitCode::SUCCESS)
}

fn qualified(object: &TeamObject) -> String {
    match object.namespace() {
        Some(ns) => format!("{ns}/{}", object.name()),
        None => object.name().to_owned(),
    }
}

/// The API server's refusal, with what to do when the API is missing.
fn api_message(resource: &ApiResource, code: u16, message: &str) -> String {
    let hints: BTreeMap<&str, &str> = [(
        "kueue.x-k8s.io",
        "install Kueue v0.19 or newer (it serves kueue.x-k8s.io/v1beta2), see docs/kueue.md",
    )]
    .into_iter()
    .collect();
    match (code, hints.get(resource.group.as_str())) {
        (404, Some(hint))
            if message.contains("could not find") || message.contains("not found") =>
        {
            format!(
                "the API server does not serve {}: {hint}",
                resource.api_version
            )
        }
        _ => format!("the API server refused it ({code}): {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(group: &str) -> ApiResource {
        ApiResource {
            group: group.to_owned(),
            version: "v1beta2".to_owned(),
            api_version: format!("{group}/v1beta2"),
            kind: "ClusterQueue".to_owned(),
            plural: "clusterqueues".to_owned(),
        }
    }

    #[test]
    fn a_missing_kueue_api_says_to_install_kueue() {
        let kueue = resource("kueue.x-k8s.io");
        assert_eq!(
            api_message(
                &kueue,
                404,
                "the server could not find the requested resource"
            ),
            "the API server does not serve kueue.x-k8s.io/v1beta2: install Kueue v0.19 or newer (it serves kueue.x-k8s.io/v1beta2), see docs/kueue.md"
        );
        assert_eq!(
            api_message(&kueue, 422, "spec.cohortName: Invalid value"),
            "the API server refused it (422): spec.cohortName: Invalid value"
        );
        assert_eq!(
            api_message(&resource("rbac.authorization.k8s.io"), 403, "forbidden"),
            "the API server refused it (403): forbidden"
        );
    }

    #[test]
    fn the_yaml_stream_separates_documents() {
        let objects = team::team_objects(&TeamSpec::new("a")).unwrap();
        let yaml = to_yaml_stream(&objects).unwrap();
        assert_eq!(yaml.matches("\n---\n").count(), objects.len() - 1);
        assert!(
            yaml.starts_with("apiVersion: rbac.authorization.k8s.io/v1\n"),
            "{yaml}"
        );
    }
}
