//! Kueue's webhook and CEL rules (kueue.md §1) as field-path errors.

use std::collections::BTreeSet;

use crate::api::{
    ClusterQueueSpec, CohortSpec, FairSharing, FlavorFungibility, LocalQueueSpec, PodSet,
    Preemption, ResourceFlavorSpec, ResourceGroup, ResourceQuota,
};
use crate::error::SetupFieldError;
use crate::load::Setup;
use crate::quantity::Quantity;

struct Ctx<'a> {
    kind: &'a str,
    name: String,
    errors: &'a mut Vec<SetupFieldError>,
}

impl Ctx<'_> {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(SetupFieldError {
            kind: self.kind.to_string(),
            name: self.name.clone(),
            path: path.into(),
            message: message.into(),
        });
    }
}

fn one_of(ctx: &mut Ctx<'_>, path: &str, value: Option<&str>, allowed: &[&str]) {
    if let Some(v) = value
        && !allowed.contains(&v)
    {
        ctx.err(
            path,
            format!(
                "Unsupported value: {v:?}: supported values: {}",
                allowed.join(", ")
            ),
        );
    }
}

/// Checks every object of `setup`; returns all problems found.
pub fn validate(setup: &Setup) -> Vec<SetupFieldError> {
    let mut errors = Vec::new();
    for f in &setup.flavors {
        let mut ctx = Ctx {
            kind: "ResourceFlavor",
            name: f.metadata.name.clone(),
            errors: &mut errors,
        };
        check_flavor(&mut ctx, &f.spec);
    }
    for c in &setup.cohorts {
        let mut ctx = Ctx {
            kind: "Cohort",
            name: c.metadata.name.clone(),
            errors: &mut errors,
        };
        check_cohort(&mut ctx, &c.metadata.name, &c.spec);
    }
    for cq in &setup.cluster_queues {
        let mut ctx = Ctx {
            kind: "ClusterQueue",
            name: cq.metadata.name.clone(),
            errors: &mut errors,
        };
        check_cluster_queue(&mut ctx, &cq.spec);
    }
    for lq in &setup.local_queues {
        let mut ctx = Ctx {
            kind: "LocalQueue",
            name: format!(
                "{}/{}",
                lq.metadata.namespace.as_deref().unwrap_or("default"),
                lq.metadata.name
            ),
            errors: &mut errors,
        };
        check_local_queue(&mut ctx, &lq.spec);
    }
    for wl in &setup.workloads {
        let mut ctx = Ctx {
            kind: "Workload",
            name: wl.key(),
            errors: &mut errors,
        };
        check_pod_sets(&mut ctx, &wl.spec.pod_sets);
    }
    if let Some(cfg) = &setup.configuration
        && let Some(fs) = &cfg.fair_sharing
    {
        let mut ctx = Ctx {
            kind: "Configuration",
            name: "config".to_string(),
            errors: &mut errors,
        };
        check_preemption_strategies(&mut ctx, &fs.preemption_strategies);
    }
    errors
}

fn check_flavor(ctx: &mut Ctx<'_>, spec: &ResourceFlavorSpec) {
    if spec.node_labels.len() > 8 {
        ctx.err("spec.nodeLabels", "Too many: must have at most 8 items");
    }
    if spec.node_taints.len() > 8 {
        ctx.err("spec.nodeTaints", "Too many: must have at most 8 items");
    }
    if spec.tolerations.len() > 8 {
        ctx.err("spec.tolerations", "Too many: must have at most 8 items");
    }
    for (i, t) in spec.node_taints.iter().enumerate() {
        one_of(
            ctx,
            &format!("spec.nodeTaints[{i}].effect"),
            Some(&t.effect),
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        );
    }
    if spec.topology_name.is_some() && spec.node_labels.is_empty() {
        ctx.err(
            "spec",
            "at least one nodeLabel is required when topology is set",
        );
    }
}

fn check_cohort(ctx: &mut Ctx<'_>, name: &str, spec: &CohortSpec) {
    let parent = spec.parent_name.as_deref().or(spec.parent.as_deref());
    if parent == Some(name) {
        ctx.err("spec.parentName", "cannot be the cohort itself");
    }
    check_resource_groups(ctx, &spec.resource_groups, parent.is_some(), "parent");
    check_fair_sharing(ctx, spec.fair_sharing.as_ref());
}

fn check_cluster_queue(ctx: &mut Ctx<'_>, s: &ClusterQueueSpec) {
    let cohort = s.cohort_name.as_deref().or(s.cohort.as_deref());
    check_resource_groups(ctx, &s.resource_groups, cohort.is_some(), "cohort");
    one_of(
        ctx,
        "spec.queueingStrategy",
        s.queueing_strategy.as_deref(),
        &["BestEffortFIFO", "StrictFIFO"],
    );
    one_of(
        ctx,
        "spec.stopPolicy",
        s.stop_policy.as_deref(),
        &["None", "Hold", "HoldAndDrain"],
    );
    if let Some(f) = &s.flavor_fungibility {
        check_fungibility(ctx, f);
    }
    if let Some(p) = &s.preemption {
        check_preemption(ctx, p);
    }
    check_fair_sharing(ctx, s.fair_sharing.as_ref());
}

fn check_local_queue(ctx: &mut Ctx<'_>, spec: &LocalQueueSpec) {
    if spec.cluster_queue.is_empty() {
        ctx.err("spec.clusterQueue", "Required value");
    }
    one_of(
        ctx,
        "spec.stopPolicy",
        spec.stop_policy.as_deref(),
        &["None", "Hold", "HoldAndDrain"],
    );
}

fn check_pod_sets(ctx: &mut Ctx<'_>, sets: &[PodSet]) {
    if sets.is_empty() || sets.len() > 18 {
        ctx.err("spec.podSets", "must have between 1 and 18 pod sets");
    }
    let mut names = BTreeSet::new();
    let mut with_min = 0;
    for (i, ps) in sets.iter().enumerate() {
        if !names.insert(ps.name.as_str()) {
            ctx.err(
                format!("spec.podSets[{i}].name"),
                format!("Duplicate value: {:?}", ps.name),
            );
        }
        if ps.min_count.is_some() {
            with_min += 1;
        }
        check_pod_set(ctx, i, ps);
    }
    if with_min > 1 {
        ctx.err("spec.podSets", "at most one podSet can use minCount");
    }
}

/// Counts and requests of pod set `i` (names are checked by the caller).
fn check_pod_set(ctx: &mut Ctx<'_>, i: usize, ps: &PodSet) {
    if ps.count < 0 {
        ctx.err(
            format!("spec.podSets[{i}].count"),
            "must be greater than or equal to 0",
        );
    }
    if let Some(m) = ps.min_count {
        if m < 1 {
            ctx.err(
                format!("spec.podSets[{i}].minCount"),
                "must be greater than or equal to 1",
            );
        }
        if m > ps.count {
            ctx.err(
                format!("spec.podSets[{i}].minCount"),
                "should be less than or equal to count",
            );
        }
    }
    for (c, container) in ps
        .template
        .spec
        .containers
        .iter()
        .chain(&ps.template.spec.init_containers)
        .enumerate()
    {
        for (r, q) in &container.resources.requests {
            if q.is_negative() {
                ctx.err(
                    format!(
                        "spec.podSets[{i}].template.spec.containers[{c}].resources.requests[{r}]"
                    ),
                    "must be greater than or equal to 0",
                );
            }
        }
    }
}

fn check_preemption_strategies(ctx: &mut Ctx<'_>, strategies: &[String]) {
    let s: Vec<&str> = strategies.iter().map(String::as_str).collect();
    let allowed: [&[&str]; 4] = [
        &[],
        &["LessThanOrEqualToFinalShare"],
        &["LessThanInitialShare"],
        &["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
    ];
    if !allowed.contains(&s.as_slice()) {
        ctx.err(
            "fairSharing.preemptionStrategies",
            "Unsupported value: must be one of [LessThanOrEqualToFinalShare], [LessThanInitialShare], [LessThanOrEqualToFinalShare, LessThanInitialShare]",
        );
    }
}

fn check_quota(ctx: &mut Ctx<'_>, path: &str, q: &Quantity) {
    if q.is_negative() {
        ctx.err(path, "must be greater than or equal to 0");
    }
}

fn check_resource_groups(
    ctx: &mut Ctx<'_>,
    groups: &[ResourceGroup],
    has_parent: bool,
    parent_word: &str,
) {
    if groups.len() > 16 {
        ctx.err(
            "spec.resourceGroups",
            "Too many: must have at most 16 items",
        );
    }
    let mut seen = Seen::default();
    let mut total_flavors = 0;
    let mut total_resources = 0;
    for (g, rg) in groups.iter().enumerate() {
        total_flavors += rg.flavors.len();
        total_resources += rg.covered_resources.len();
        check_resource_group(ctx, g, rg, &mut seen, has_parent, parent_word);
    }
    if total_flavors > 256 {
        ctx.err(
            "spec.resourceGroups",
            "must have at most 256 flavors in total",
        );
    }
    if total_resources > 256 {
        ctx.err(
            "spec.resourceGroups",
            "must have at most 256 covered resources in total",
        );
    }
}

/// Resources and flavors already named by earlier resource groups.
#[derive(Default)]
struct Seen {
    resources: BTreeSet<String>,
    flavors: BTreeSet<String>,
}

/// Sizes, duplicates and flavor quotas of resource group `g`.
fn check_resource_group(
    ctx: &mut Ctx<'_>,
    g: usize,
    rg: &ResourceGroup,
    seen: &mut Seen,
    has_parent: bool,
    parent_word: &str,
) {
    let gp = format!("spec.resourceGroups[{g}]");
    if rg.covered_resources.is_empty() || rg.covered_resources.len() > 64 {
        ctx.err(
            format!("{gp}.coveredResources"),
            "must have between 1 and 64 items",
        );
    }
    if rg.flavors.is_empty() || rg.flavors.len() > 64 {
        ctx.err(format!("{gp}.flavors"), "must have between 1 and 64 items");
    }
    if rg.flavors.len() * rg.covered_resources.len() > 512 {
        ctx.err(
            gp.clone(),
            "must have at most 512 flavor and resource combinations",
        );
    }
    for (i, r) in rg.covered_resources.iter().enumerate() {
        if !seen.resources.insert(r.clone()) {
            ctx.err(
                format!("{gp}.coveredResources[{i}]"),
                format!("Duplicate value: {r:?}: a resource may appear in only one resource group"),
            );
        }
    }
    for (fi, f) in rg.flavors.iter().enumerate() {
        let fp = format!("{gp}.flavors[{fi}]");
        if !seen.flavors.insert(f.name.clone()) {
            ctx.err(
                format!("{fp}.name"),
                format!(
                    "Duplicate value: {:?}: a flavor may appear in only one resource group",
                    f.name
                ),
            );
        }
        if f.resources.len() != rg.covered_resources.len() {
            ctx.err(
                format!("{fp}.resources"),
                "must have the same number of resources as the coveredResources",
            );
        }
        for (ri, rq) in f.resources.iter().enumerate() {
            let rp = format!("{fp}.resources[{ri}]");
            check_resource_quota(
                ctx,
                &rp,
                ri,
                rq,
                &rg.covered_resources,
                has_parent,
                parent_word,
            );
        }
    }
}

/// One flavor's quota for resource `ri`: its name matches `coveredResources[ri]`, amounts are
/// not negative, limits need a parent, the lending limit stays within the nominal quota.
fn check_resource_quota(
    ctx: &mut Ctx<'_>,
    rp: &str,
    ri: usize,
    rq: &ResourceQuota,
    covered: &[String],
    has_parent: bool,
    parent_word: &str,
) {
    if covered.get(ri) != Some(&rq.name) {
        ctx.err(
            format!("{rp}.name"),
            format!(
                "must match the name in coveredResources[{ri}] ({:?})",
                covered.get(ri).map(String::as_str).unwrap_or("")
            ),
        );
    }
    check_quota(ctx, &format!("{rp}.nominalQuota"), &rq.nominal_quota);
    if let Some(bl) = &rq.borrowing_limit {
        check_quota(ctx, &format!("{rp}.borrowingLimit"), bl);
        if !has_parent {
            ctx.err(
                format!("{rp}.borrowingLimit"),
                format!("borrowingLimit must be nil when {parent_word} is empty"),
            );
        }
    }
    if let Some(ll) = &rq.lending_limit {
        check_quota(ctx, &format!("{rp}.lendingLimit"), ll);
        if !has_parent {
            ctx.err(
                format!("{rp}.lendingLimit"),
                format!("lendingLimit must be nil when {parent_word} is empty"),
            );
        }
        if let (Some(l), Some(n)) = (ll.milli(), rq.nominal_quota.milli())
            && l > n
        {
            ctx.err(
                format!("{rp}.lendingLimit"),
                format!(
                    "Invalid value: {:?}: must be less than or equal to the nominalQuota",
                    ll.text()
                ),
            );
        }
    }
}

fn check_fungibility(ctx: &mut Ctx<'_>, f: &FlavorFungibility) {
    let policies = ["MayStopSearch", "TryNextFlavor", "Borrow", "Preempt"];
    one_of(
        ctx,
        "spec.flavorFungibility.whenCanBorrow",
        f.when_can_borrow.as_deref(),
        &policies,
    );
    one_of(
        ctx,
        "spec.flavorFungibility.whenCanPreempt",
        f.when_can_preempt.as_deref(),
        &policies,
    );
    one_of(
        ctx,
        "spec.flavorFungibility.preference",
        f.preference.as_deref(),
        &["BorrowingOverPreemption", "PreemptionOverBorrowing"],
    );
    if f.preference.is_some()
        && (f.when_can_borrow.as_deref() != Some("TryNextFlavor")
            || f.when_can_preempt.as_deref() != Some("TryNextFlavor"))
    {
        ctx.err(
            "spec.flavorFungibility.preference",
            "preference can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor",
        );
    }
}

fn check_preemption(ctx: &mut Ctx<'_>, p: &Preemption) {
    one_of(
        ctx,
        "spec.preemption.reclaimWithinCohort",
        p.reclaim_within_cohort.as_deref(),
        &["Never", "LowerPriority", "Any"],
    );
    one_of(
        ctx,
        "spec.preemption.withinClusterQueue",
        p.within_cluster_queue.as_deref(),
        &["Never", "LowerPriority", "LowerOrNewerEqualPriority"],
    );
    if let Some(b) = &p.borrow_within_cohort {
        one_of(
            ctx,
            "spec.preemption.borrowWithinCohort.policy",
            b.policy.as_deref(),
            &["Never", "LowerPriority"],
        );
        let reclaim_never = p.reclaim_within_cohort.as_deref().unwrap_or("Never") == "Never";
        if reclaim_never && b.policy.as_deref().unwrap_or("Never") != "Never" {
            ctx.err(
                "spec.preemption",
                "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
            );
        }
    }
}

fn check_fair_sharing(ctx: &mut Ctx<'_>, fs: Option<&FairSharing>) {
    if let Some(w) = fs.and_then(|f| f.weight.as_ref()) {
        match w.milli() {
            Some(m) if m < 0 => ctx.err(
                "spec.fairSharing.weight",
                "must be greater than or equal to 0",
            ),
            _ => {}
        }
    }
}
