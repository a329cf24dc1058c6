//! Random admission scenarios (`kubetrain queue generate --random N --seed S`): small, independent
//! quota trees for comparing the model with a real Kueue (e2e `kueue_compare.py`, issue 14 item 4).
//!
//! Scenario `i` owns every name it uses (flavors `s<i>-…`, cohort `s<i>-cohort`, queues `s<i>-cq<j>`,
//! namespace `s<i>`), so any number of scenarios can share one cluster, or one `simulate` run, without
//! touching each other. Each scenario draws: 1–2 flavors (one possibly labelled, one possibly tainted),
//! 1–3 ClusterQueues in one cohort (or none; in about a third of the scenarios with a cohort, a hierarchy: a
//! root cohort, possibly with a quota of its own, over two child cohorts the ClusterQueues alternate
//! between), cpu and `example.com/gpu` quotas with optional borrowing
//! and lending limits, queueing strategy, preemption policies and flavor fungibility, and 3–8
//! Workloads with priorities, pod counts, `minCount`, node selectors and tolerations.

use std::collections::BTreeMap;

use crate::api::{
    BorrowWithinCohort, ClusterQueueSpec, CohortSpec, Container, FlavorFungibility, FlavorQuotas,
    LabelSelector, LocalQueueSpec, ObjectMeta, PodSet, PodSpec, PodTemplateSpec, Preemption,
    ResourceFlavorSpec, ResourceGroup, ResourceQuota, ResourceRequirements, Taint, Toleration,
    WorkloadSpec, WorkloadStatus,
};
use crate::load::{KueueObject, Setup, WorkloadObject};
use crate::quantity::Quantity;

/// SplitMix64: a tiny deterministic generator (the same seed gives the same scenarios everywhere).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

fn q(v: i64) -> Quantity {
    Quantity::from_units(v)
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}

/// `count` random scenarios from `seed`, all in one [`Setup`] (write it with [`Setup::to_yaml`]).
///
/// ```
/// let setup = kubetrain_kueue::sim::random::scenarios(3, 7);
/// assert_eq!(setup.namespaces.len(), 3);
/// assert!(kubetrain_kueue::model::Model::build(&setup).is_ok());
/// // Deterministic: the same seed gives the same objects.
/// assert_eq!(setup, kubetrain_kueue::sim::random::scenarios(3, 7));
///
/// // Some scenarios are cohort hierarchies: child cohorts under a root, ClusterQueues in the children.
/// let many = kubetrain_kueue::sim::random::scenarios(40, 1);
/// let children: Vec<_> = many.cohorts.iter().filter(|c| c.spec.parent_name.is_some()).collect();
/// assert!(!children.is_empty());
/// assert!(children.iter().all(|c| many.cohorts.iter().any(|r| Some(&r.metadata.name) == c.spec.parent_name.as_ref())));
/// assert!(many.cluster_queues.iter().any(|q| q.spec.cohort_name.as_deref().is_some_and(|n| n.ends_with("-a"))));
/// assert!(kubetrain_kueue::model::Model::build(&many).is_ok());
/// ```
pub fn scenarios(count: usize, seed: u64) -> Setup {
    let mut setup = Setup::default();
    for i in 0..count {
        let mut rng = Rng(seed ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        add_scenario(&mut setup, &mut rng, &format!("s{i}"));
    }
    setup
}

/// One or two flavors; each may carry a pool label, the second may carry a spot taint.
fn add_flavors(setup: &mut Setup, rng: &mut Rng, p: &str) -> Vec<String> {
    let n = rng.range(1, 2);
    let mut names = Vec::new();
    for f in 0..n {
        let name = format!("{p}-f{f}");
        let mut spec = ResourceFlavorSpec::default();
        if rng.chance(50) {
            spec.node_labels
                .insert("kubetrain.dev/pool".to_string(), format!("{p}-pool{f}"));
        }
        if f == 1 && rng.chance(40) {
            spec.node_taints.push(Taint {
                key: "kubetrain.dev/spot".to_string(),
                value: "true".to_string(),
                effect: "NoSchedule".to_string(),
                time_added: None,
            });
        }
        setup.flavors.push(KueueObject {
            metadata: meta(&name, None),
            spec,
        });
        names.push(name);
    }
    names
}

fn cluster_queue(rng: &mut Rng, flavors: &[String], cohort: Option<&str>) -> ClusterQueueSpec {
    let resources = ["cpu", "example.com/gpu"];
    let rg_flavors = flavors
        .iter()
        .map(|f| FlavorQuotas {
            name: f.clone(),
            resources: resources
                .iter()
                .map(|r| {
                    let nominal = rng.range(0, 8);
                    ResourceQuota {
                        name: (*r).to_string(),
                        nominal_quota: q(nominal),
                        borrowing_limit: (cohort.is_some() && rng.chance(30))
                            .then(|| q(rng.range(0, 4))),
                        lending_limit: (cohort.is_some() && rng.chance(30))
                            .then(|| q(rng.range(0, nominal))),
                    }
                })
                .collect(),
        })
        .collect();
    let within = rng.pick(&["Never", "LowerPriority", "LowerOrNewerEqualPriority"]);
    let reclaim = rng.pick(&["Never", "LowerPriority", "Any"]);
    let borrow_within = (reclaim != "Never" && rng.chance(30)).then(|| BorrowWithinCohort {
        policy: Some("LowerPriority".to_string()),
        max_priority_threshold: rng.chance(50).then(|| rng.range(0, 100) as i32),
    });
    let fungibility = rng.chance(40).then(|| FlavorFungibility {
        when_can_borrow: Some(rng.pick(&["MayStopSearch", "TryNextFlavor"]).to_string()),
        when_can_preempt: Some(rng.pick(&["MayStopSearch", "TryNextFlavor"]).to_string()),
        preference: None,
    });
    ClusterQueueSpec {
        resource_groups: vec![ResourceGroup {
            covered_resources: resources.iter().map(|r| (*r).to_string()).collect(),
            flavors: rg_flavors,
        }],
        cohort_name: cohort.map(str::to_string),
        queueing_strategy: Some(rng.pick(&["BestEffortFIFO", "StrictFIFO"]).to_string()),
        namespace_selector: Some(LabelSelector::default()),
        flavor_fungibility: fungibility,
        preemption: Some(Preemption {
            reclaim_within_cohort: Some(reclaim.to_string()),
            within_cluster_queue: Some(within.to_string()),
            borrow_within_cohort: borrow_within,
        }),
        ..ClusterQueueSpec::default()
    }
}

/// A hierarchy under `root`: two child cohorts (`<root>-a`, `<root>-b`), and on the root, half the time, a
/// quota of its own that the whole subtree shares. Returns the children's names.
fn add_cohort_tree(
    setup: &mut Setup,
    rng: &mut Rng,
    flavors: &[String],
    root: &str,
) -> Vec<String> {
    let shared = rng.chance(50).then(|| {
        let resources = ["cpu", "example.com/gpu"];
        ResourceGroup {
            covered_resources: resources.iter().map(|r| (*r).to_string()).collect(),
            flavors: flavors
                .iter()
                .map(|f| FlavorQuotas {
                    name: f.clone(),
                    resources: resources
                        .iter()
                        .map(|r| ResourceQuota {
                            name: (*r).to_string(),
                            nominal_quota: q(rng.range(0, 4)),
                            borrowing_limit: None,
                            lending_limit: None,
                        })
                        .collect(),
                })
                .collect(),
        }
    });
    setup.cohorts.push(KueueObject {
        metadata: meta(root, None),
        spec: CohortSpec {
            resource_groups: shared.into_iter().collect(),
            ..CohortSpec::default()
        },
    });
    ["a", "b"]
        .iter()
        .map(|suffix| {
            let name = format!("{root}-{suffix}");
            setup.cohorts.push(KueueObject {
                metadata: meta(&name, None),
                spec: CohortSpec {
                    parent_name: Some(root.to_string()),
                    ..CohortSpec::default()
                },
            });
            name
        })
        .collect()
}

fn add_scenario(setup: &mut Setup, rng: &mut Rng, p: &str) {
    setup.namespaces.push(meta(p, None));
    let flavors = add_flavors(setup, rng, p);
    let cohort = format!("{p}-cohort");
    let cohort = rng.chance(80).then_some(cohort.as_str());
    let nq = if cohort.is_some() { rng.range(1, 3) } else { 1 };
    // Drawn from a stream of its own, so that every other draw of a scenario is as it was before
    // hierarchies were generated (the documented runs stay reproducible for the flat scenarios).
    let mut shape = Rng(rng.0 ^ 0x6869_6572_6172_6368);
    let children = match cohort {
        Some(root) if shape.chance(35) => add_cohort_tree(setup, &mut shape, &flavors, root),
        _ => Vec::new(),
    };
    for c in 0..nq {
        let cq = format!("{p}-cq{c}");
        // In a hierarchy the ClusterQueues alternate between the two child cohorts.
        let parent = children.get(c as usize % 2).map(String::as_str).or(cohort);
        setup.cluster_queues.push(KueueObject {
            metadata: meta(&cq, None),
            spec: cluster_queue(rng, &flavors, parent),
        });
        setup.local_queues.push(KueueObject {
            metadata: meta(&format!("lq{c}"), Some(p)),
            spec: LocalQueueSpec {
                cluster_queue: cq,
                ..LocalQueueSpec::default()
            },
        });
    }
    for w in 0..rng.range(3, 8) {
        let count = rng.range(1, 4) as i32;
        let mut requests = BTreeMap::from([("cpu".to_string(), q(rng.range(1, 3)))]);
        if rng.chance(50) {
            requests.insert("example.com/gpu".to_string(), q(rng.range(1, 2)));
        }
        let mut spec = PodSpec {
            containers: vec![Container {
                name: "c".to_string(),
                resources: ResourceRequirements {
                    requests,
                    ..ResourceRequirements::default()
                },
                restart_policy: None,
            }],
            ..PodSpec::default()
        };
        if rng.chance(20) {
            spec.node_selector.insert(
                "kubetrain.dev/pool".to_string(),
                format!("{p}-pool{}", rng.range(0, 1)),
            );
        }
        if rng.chance(40) {
            spec.tolerations.push(Toleration {
                key: Some("kubetrain.dev/spot".to_string()),
                operator: Some("Exists".to_string()),
                ..Toleration::default()
            });
        }
        setup.workloads.push(WorkloadObject {
            metadata: meta(&format!("w{w}"), Some(p)),
            spec: WorkloadSpec {
                queue_name: Some(format!("lq{}", rng.range(0, nq - 1))),
                priority: Some(*[0, 0, 50, 100].get(rng.range(0, 3) as usize).unwrap_or(&0)),
                pod_sets: vec![PodSet {
                    name: "main".to_string(),
                    template: PodTemplateSpec {
                        spec,
                        ..PodTemplateSpec::default()
                    },
                    count,
                    min_count: (count > 1 && rng.chance(20))
                        .then(|| rng.range(1, i64::from(count) - 1) as i32),
                    topology_request: None,
                }],
                ..WorkloadSpec::default()
            },
            status: WorkloadStatus::default(),
        });
    }
}
