//! The cohort forest and its quota arithmetic (kueue.md §2.1): subtree quota, local (unlendable)
//! quota, usage propagation, `available`, `potentialAvailable` and the borrowing height.

use crate::quantity::{Count, add, sub};

/// Index of a node (ClusterQueue or Cohort) in the forest.
pub type NodeId = usize;
/// Index of a (flavor, resource) pair.
pub type FrId = usize;

/// The static part of the forest: structure and quotas, dense per node × FR.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Number of flavor-resource pairs.
    pub nfr: usize,
    /// Node names (ClusterQueue or Cohort names).
    pub names: Vec<String>,
    /// Whether the node is a ClusterQueue (leaf).
    pub is_cq: Vec<bool>,
    /// Whether the node is a Cohort declared by a Cohort object (not implicit): upstream's
    /// Cohort reconciler then requeues the tree whenever a ClusterQueue below changes status.
    pub(crate) declared: Vec<bool>,
    /// Parent cohort.
    pub parent: Vec<Option<NodeId>>,
    /// Children (ClusterQueues and Cohorts).
    pub children: Vec<Vec<NodeId>>,
    /// Height: 0 for a ClusterQueue, 1 for a flat cohort.
    pub height: Vec<u32>,
    /// Nominal quota per node × FR.
    pub nominal: Vec<Count>,
    /// Borrowing limit per node × FR (`None` = unlimited).
    pub borrowing_limit: Vec<Option<Count>>,
    /// Lending limit per node × FR (`None` = all nominal lendable).
    pub lending_limit: Vec<Option<Count>>,
    /// Subtree quota per node × FR.
    pub subtree: Vec<Count>,
    /// Local (never lent) quota per node × FR.
    pub local: Vec<Count>,
    /// Fair-sharing weight in milli-units.
    pub weight_milli: Vec<i64>,
}

/// Usage per node × FR; the mutable half of the quota state, cheap to clone for a snapshot.
pub type Usage = Vec<Count>;

impl Tree {
    /// Adds a node with zero quota and returns its id.
    pub fn add_node(&mut self, name: &str, is_cq: bool) -> NodeId {
        let id = self.names.len();
        self.names.push(name.to_string());
        self.is_cq.push(is_cq);
        self.declared.push(false);
        self.parent.push(None);
        self.children.push(Vec::new());
        self.height.push(0);
        self.weight_milli.push(1000);
        let n = self.nfr;
        self.nominal.extend(std::iter::repeat_n(0, n));
        self.borrowing_limit.extend(std::iter::repeat_n(None, n));
        self.lending_limit.extend(std::iter::repeat_n(None, n));
        self.subtree.extend(std::iter::repeat_n(0, n));
        self.local.extend(std::iter::repeat_n(0, n));
        id
    }

    /// Index of `(node, fr)` in the dense arrays.
    #[inline]
    pub fn ix(&self, node: NodeId, fr: FrId) -> usize {
        node * self.nfr + fr
    }

    /// Computes subtree quotas, local quotas and heights bottom-up; call after the structure is
    /// final. The forest must be acyclic.
    pub fn finish(&mut self) {
        let roots: Vec<NodeId> = (0..self.names.len())
            .filter(|&n| self.parent[n].is_none())
            .collect();
        for r in roots {
            self.finish_node(r);
        }
    }

    fn finish_node(&mut self, n: NodeId) {
        let children = self.children[n].clone();
        let mut height = if self.is_cq[n] {
            0
        } else {
            u32::from(!children.is_empty())
        };
        for fr in 0..self.nfr {
            let i = self.ix(n, fr);
            self.subtree[i] = self.nominal[i];
        }
        for c in children {
            self.finish_node(c);
            if !self.is_cq[c] {
                height = height.max(self.height[c] + 1);
            }
            for fr in 0..self.nfr {
                let ci = self.ix(c, fr);
                let i = self.ix(n, fr);
                self.subtree[i] = add(self.subtree[i], sub(self.subtree[ci], self.local[ci]));
            }
        }
        self.height[n] = height;
        for fr in 0..self.nfr {
            let i = self.ix(n, fr);
            self.local[i] = match self.lending_limit[i] {
                Some(ll) if self.parent[n].is_some() => sub(self.subtree[i], ll).max(0),
                _ => 0,
            };
        }
    }

    /// Ancestors from the parent up to the root.
    pub fn ancestors(&self, n: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        std::iter::successors(self.parent[n], move |&p| self.parent[p])
    }

    /// Whether a declared Cohort is above `n`.
    pub(crate) fn under_declared_cohort(&self, n: NodeId) -> bool {
        self.ancestors(n).any(|a| self.declared[a])
    }

    /// The root of `n`'s tree.
    pub fn root(&self, n: NodeId) -> NodeId {
        self.ancestors(n).last().unwrap_or(n)
    }

    /// `max(0, localQuota − usage)`.
    pub fn local_available(&self, u: &Usage, n: NodeId, fr: FrId) -> Count {
        let i = self.ix(n, fr);
        sub(self.local[i], u[i]).max(0)
    }

    fn available_raw(&self, u: &Usage, n: NodeId, fr: FrId) -> Count {
        let i = self.ix(n, fr);
        let Some(p) = self.parent[n] else {
            return sub(self.subtree[i], u[i]);
        };
        let mut pa = self.available_raw(u, p, fr);
        if let Some(bl) = self.borrowing_limit[i] {
            let lq = self.local[i];
            let stored = sub(self.subtree[i], lq);
            let used = sub(u[i], lq).max(0);
            pa = pa.min(add(sub(stored, used), bl));
        }
        add(self.local_available(u, n, fr), pa)
    }

    /// Unused quota a node can use now, including what it may borrow (never negative).
    pub fn available(&self, u: &Usage, n: NodeId, fr: FrId) -> Count {
        self.available_raw(u, n, fr).max(0)
    }

    /// The most a node could ever use with zero usage everywhere ("maximum capacity").
    pub fn potential_available(&self, n: NodeId, fr: FrId) -> Count {
        let i = self.ix(n, fr);
        let Some(p) = self.parent[n] else {
            return self.subtree[i];
        };
        let mut a = add(self.local[i], self.potential_available(p, fr));
        if let Some(bl) = self.borrowing_limit[i] {
            a = a.min(add(self.subtree[i], bl));
        }
        a
    }

    /// Books `v` of usage on `n` and the part above its local quota on its ancestors.
    pub fn add_usage(&self, u: &mut Usage, n: NodeId, fr: FrId, v: Count) {
        let la = self.local_available(u, n, fr);
        let i = self.ix(n, fr);
        u[i] = add(u[i], v);
        if let Some(p) = self.parent[n]
            && v > la
        {
            self.add_usage(u, p, fr, sub(v, la));
        }
    }

    /// Releases `v` of usage from `n` and what it had charged to its ancestors.
    pub fn remove_usage(&self, u: &mut Usage, n: NodeId, fr: FrId, v: Count) {
        let i = self.ix(n, fr);
        let stored = sub(u[i], self.local[i]);
        u[i] = sub(u[i], v);
        if stored > 0
            && let Some(p) = self.parent[n]
        {
            self.remove_usage(u, p, fr, v.min(stored));
        }
    }

    /// Whether using `v` more would exceed the node's own (subtree) quota.
    pub fn borrowing_with(&self, u: &Usage, n: NodeId, fr: FrId, v: Count) -> bool {
        let i = self.ix(n, fr);
        self.subtree[i] < add(u[i], v)
    }

    /// Whether the node uses more than its own (subtree) quota.
    pub fn borrowing(&self, u: &Usage, n: NodeId, fr: FrId) -> bool {
        self.borrowing_with(u, n, fr, 0)
    }

    /// `FindHeightOfLowestSubtreeThatFits`: the borrowing level needed for `v` and whether the
    /// hierarchy could reclaim quota for it.
    pub fn height_of_lowest_subtree_that_fits(
        &self,
        u: &Usage,
        cq: NodeId,
        fr: FrId,
        v: Count,
    ) -> (u32, bool) {
        let has_parent = self.parent[cq].is_some();
        if !self.borrowing_with(u, cq, fr, v) || !has_parent {
            return (0, has_parent);
        }
        let mut remaining = sub(v, self.local_available(u, cq, fr));
        let mut last = cq;
        for a in self.ancestors(cq) {
            last = a;
            if !self.borrowing_with(u, a, fr, remaining) {
                return (self.height[a], self.parent[a].is_some());
            }
            remaining = sub(remaining, self.local_available(u, a, fr));
        }
        (self.height[last], false)
    }

    /// `QuantitiesFitInQuota`: whether all requests fit the node's subtree quota, and what is
    /// left to find higher up.
    pub fn quantities_fit_in_quota(
        &self,
        u: &Usage,
        n: NodeId,
        requests: &[(FrId, Count)],
    ) -> (bool, Vec<(FrId, Count)>) {
        let mut fits = true;
        let mut remaining = Vec::with_capacity(requests.len());
        for &(fr, v) in requests {
            let i = self.ix(n, fr);
            if self.subtree[i] < add(u[i], v) {
                fits = false;
            }
            remaining.push((fr, sub(v, self.local_available(u, n, fr)).max(0)));
        }
        (fits, remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, parent, is ClusterQueue, nominal, borrowing limit, lending limit).
    type NodeSpec<'a> = (
        &'a str,
        Option<usize>,
        bool,
        Count,
        Option<Count>,
        Option<Count>,
    );

    fn tree(spec: &[NodeSpec<'_>]) -> Tree {
        let mut t = Tree {
            nfr: 1,
            ..Tree::default()
        };
        for (name, _, is_cq, ..) in spec {
            t.add_node(name, *is_cq);
        }
        for (i, (_, parent, _, nominal, bl, ll)) in spec.iter().enumerate() {
            t.parent[i] = *parent;
            if let Some(p) = parent {
                t.children[*p].push(i);
            }
            t.nominal[i] = *nominal;
            t.borrowing_limit[i] = *bl;
            t.lending_limit[i] = *ll;
        }
        t.finish();
        t
    }

    #[test]
    fn flat_cohort_borrowing_limit() {
        // kueue.md §2.1: alpha(50, BL 50) using 45, beta(50, BL 10) ⇒ available(beta) = 55.
        let t = tree(&[
            ("eng", None, false, 0, None, None),
            ("alpha", Some(0), true, 50, Some(50), None),
            ("beta", Some(0), true, 50, Some(10), None),
        ]);
        let mut u = vec![0; 3];
        t.add_usage(&mut u, 1, 0, 45);
        assert_eq!(t.available(&u, 2, 0), 55);
        assert_eq!(t.potential_available(2, 0), 60);
        assert_eq!(t.potential_available(1, 0), 100);
    }

    #[test]
    fn lending_limits() {
        // lend-a(3, LL 2), lend-b(2, LL 2) using 2 ⇒ subtree 4, available(lend-b) = 2.
        let t = tree(&[
            ("c", None, false, 0, None, None),
            ("lend-a", Some(0), true, 3, None, Some(2)),
            ("lend-b", Some(0), true, 2, None, Some(2)),
        ]);
        let mut u = vec![0; 3];
        t.add_usage(&mut u, 2, 0, 2);
        assert_eq!(t.subtree[0], 4);
        assert_eq!(u[0], 2);
        assert_eq!(t.available(&u, 2, 0), 2);
        assert_eq!(t.available(&u, 1, 0), 3);
        t.remove_usage(&mut u, 2, 0, 2);
        assert_eq!(u, vec![0, 0, 0]);
    }

    #[test]
    fn hierarchical_borrowing() {
        // child{lender(10, LL 3), borrower(5, BL 10, using 5)} under root ⇒ available(borrower) = 3.
        let t = tree(&[
            ("root", None, false, 0, None, None),
            ("child", Some(0), false, 0, None, None),
            ("lender", Some(1), true, 10, None, Some(3)),
            ("borrower", Some(1), true, 5, Some(10), None),
        ]);
        let mut u = vec![0; 4];
        t.add_usage(&mut u, 3, 0, 5);
        assert_eq!(t.available(&u, 3, 0), 3);
        assert_eq!(t.height[0], 2);
        assert_eq!(t.height[1], 1);
        assert_eq!(t.height_of_lowest_subtree_that_fits(&u, 3, 0, 1), (1, true));
        assert_eq!(t.height_of_lowest_subtree_that_fits(&u, 2, 0, 7), (0, true));
    }
}
