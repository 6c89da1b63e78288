//! Topologies: hosts, switches and directed links, the standard data-centre
//! shapes (fat-tree, leaf-spine, single switch), and ECMP routing.
//!
//! Node ids are dense: hosts are `0..hosts` (so host `h` is node `h`),
//! switches follow. Every physical cable is two directed [`Link`]s, one per
//! direction, each with its own output queue in the packet engine. Routes
//! are lists of link ids from a source host to a destination host.

use std::fmt;

use crate::units::{parse_bytes, parse_rate, parse_time, Rate, Time, UnitError, PS_PER_US};

pub type NodeId = usize;
pub type LinkId = usize;

/// What a node is; switches carry their tier for reports (0 = ToR/leaf).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Host,
    Switch { tier: u8 },
}

/// One direction of a cable: the output port of `from` towards `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub from: NodeId,
    pub to: NodeId,
    pub rate: Rate,
    /// Propagation latency of the cable.
    pub latency: Time,
    /// Output-queue buffer at `from`, in bytes (drop-tail beyond it).
    pub buffer: u64,
}

/// Rate, latency and buffer given to every link of a generated topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    pub rate: Rate,
    pub latency: Time,
    pub buffer: u64,
}

impl Default for LinkSpec {
    /// 10 Gb/s, 1 us, 600 KB (400 full packets: deep enough for the
    /// paper's ECN threshold of 85 packets with room for bursts).
    fn default() -> LinkSpec {
        LinkSpec {
            rate: Rate::gbit(10),
            latency: PS_PER_US,
            buffer: 600_000,
        }
    }
}

impl LinkSpec {
    /// `rate`, `latency`, `buffer` as strings ("10gbit", "1us", "600KB");
    /// `None` keeps the default.
    pub fn parse(
        rate: Option<&str>,
        latency: Option<&str>,
        buffer: Option<&str>,
    ) -> Result<LinkSpec, UnitError> {
        let mut spec = LinkSpec::default();
        if let Some(r) = rate {
            spec.rate = parse_rate(r)?;
        }
        if let Some(l) = latency {
            spec.latency = parse_time(l)?;
        }
        if let Some(b) = buffer {
            spec.buffer = parse_bytes(b)?;
        }
        Ok(spec)
    }
}

/// Hosts, switches and links, with adjacency and per-destination distances
/// for ECMP.
#[derive(Clone, Debug)]
pub struct Topology {
    pub name: String,
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    hosts: usize,
    /// Output links of each node.
    out: Vec<Vec<LinkId>>,
    /// `dist[h][n]`: hops from node `n` to host `h` (u16::MAX: unreachable).
    dist: Vec<Vec<u16>>,
}

impl Topology {
    /// Builds a topology from nodes (hosts first) and cables; each cable
    /// becomes two directed links with `spec`.
    pub fn new(
        name: String,
        nodes: Vec<Node>,
        cables: &[(NodeId, NodeId)],
        spec: LinkSpec,
    ) -> Self {
        let hosts = nodes.iter().take_while(|n| **n == Node::Host).count();
        assert!(
            nodes[hosts..].iter().all(|n| *n != Node::Host),
            "hosts must come first"
        );
        let mut links = Vec::with_capacity(cables.len() * 2);
        let mut out = vec![Vec::new(); nodes.len()];
        for &(a, b) in cables {
            for (from, to) in [(a, b), (b, a)] {
                out[from].push(links.len());
                links.push(Link {
                    from,
                    to,
                    rate: spec.rate,
                    latency: spec.latency,
                    buffer: spec.buffer,
                });
            }
        }
        let mut topo = Topology {
            name,
            nodes,
            links,
            hosts,
            out,
            dist: Vec::new(),
        };
        topo.dist = (0..hosts).map(|h| topo.bfs_to(h)).collect();
        topo
    }

    /// Hops from every node to node `target` (links are symmetric, so a
    /// BFS from the target over out-links gives distances towards it).
    fn bfs_to(&self, target: NodeId) -> Vec<u16> {
        let mut dist = vec![u16::MAX; self.nodes.len()];
        let mut queue = std::collections::VecDeque::from([target]);
        dist[target] = 0;
        while let Some(n) = queue.pop_front() {
            for &l in &self.out[n] {
                let m = self.links[l].to;
                // Paths never pass through another host.
                if dist[m] == u16::MAX {
                    dist[m] = dist[n] + 1;
                    if self.nodes[m] != Node::Host {
                        queue.push_back(m);
                    }
                }
            }
        }
        dist
    }

    pub fn hosts(&self) -> usize {
        self.hosts
    }

    pub fn switches(&self) -> usize {
        self.nodes.len() - self.hosts
    }

    pub fn out_links(&self, node: NodeId) -> &[LinkId] {
        &self.out[node]
    }

    /// Output links of `node` on a shortest path to host `dst`.
    pub fn next_hops(&self, node: NodeId, dst: NodeId) -> impl Iterator<Item = LinkId> + '_ {
        let d = self.dist[dst][node];
        self.out[node].iter().copied().filter(move |&l| {
            d != u16::MAX && self.dist[dst][self.links[l].to] == d.wrapping_sub(1)
        })
    }

    /// Every shortest path from host `src` to host `dst`, as link lists
    /// (empty list when `src == dst`). Exponential in general; data-centre
    /// topologies have few (a k=16 fat-tree: at most 64 between pods).
    pub fn shortest_paths(&self, src: NodeId, dst: NodeId) -> Vec<Vec<LinkId>> {
        let mut paths = Vec::new();
        let mut stack = vec![(src, Vec::new())];
        while let Some((node, path)) = stack.pop() {
            if node == dst {
                paths.push(path);
                continue;
            }
            for l in self.next_hops(node, dst) {
                let mut p = path.clone();
                p.push(l);
                stack.push((self.links[l].to, p));
            }
        }
        paths.sort();
        paths
    }

    /// The ECMP route of flow `flow` from host `src` to host `dst`: at each
    /// hop the next link is picked by a hash of (flow, node), as switches
    /// hash the 5-tuple, so one flow keeps one path and flows spread.
    pub fn ecmp_route(&self, src: NodeId, dst: NodeId, flow: u64) -> Vec<LinkId> {
        assert!(src < self.hosts && dst < self.hosts, "routes join hosts");
        assert!(
            self.dist[dst][src] != u16::MAX,
            "host {dst} unreachable from {src}"
        );
        let mut route = Vec::new();
        let mut node = src;
        while node != dst {
            let hops: Vec<LinkId> = self.next_hops(node, dst).collect();
            let pick = mix(flow ^ mix(node as u64)) % hops.len() as u64;
            let l = hops[pick as usize];
            route.push(l);
            node = self.links[l].to;
        }
        route
    }

    /// Hops on a shortest path between two hosts.
    pub fn hops(&self, src: NodeId, dst: NodeId) -> usize {
        self.dist[dst][src] as usize
    }

    /// A `k`-ary fat-tree (Al-Fares et al.): `k` pods of `k/2` ToR and `k/2`
    /// aggregation switches, `(k/2)^2` cores, `k^3/4` hosts (`k/2` per ToR).
    /// k=16: 1024 hosts, 128 ToR, 128 aggregation, 64 core switches.
    pub fn fat_tree(k: usize, spec: LinkSpec) -> Result<Topology, TopologyError> {
        if k < 2 || !k.is_multiple_of(2) {
            return Err(TopologyError::FatTreeK(k));
        }
        let h = k / 2;
        let hosts = k * k * k / 4;
        let tors = k * h;
        let aggs = k * h;
        let cores = h * h;
        let tor0 = hosts;
        let agg0 = tor0 + tors;
        let core0 = agg0 + aggs;
        let mut nodes = vec![Node::Host; hosts];
        nodes.extend(std::iter::repeat_n(Node::Switch { tier: 0 }, tors));
        nodes.extend(std::iter::repeat_n(Node::Switch { tier: 1 }, aggs));
        nodes.extend(std::iter::repeat_n(Node::Switch { tier: 2 }, cores));
        let mut cables = Vec::new();
        for host in 0..hosts {
            cables.push((host, tor0 + host / h));
        }
        for pod in 0..k {
            for t in 0..h {
                for a in 0..h {
                    cables.push((tor0 + pod * h + t, agg0 + pod * h + a));
                }
            }
            // Aggregation switch `a` of every pod connects to cores a*h..a*h+h.
            for a in 0..h {
                for c in 0..h {
                    cables.push((agg0 + pod * h + a, core0 + a * h + c));
                }
            }
        }
        Ok(Topology::new(
            format!("fattree:k={k}"),
            nodes,
            &cables,
            spec,
        ))
    }

    /// Two-tier leaf-spine: `hosts_per_leaf` hosts per leaf, every leaf
    /// connected to every spine.
    pub fn leaf_spine(
        leaves: usize,
        spines: usize,
        hosts_per_leaf: usize,
        spec: LinkSpec,
    ) -> Result<Topology, TopologyError> {
        if leaves == 0 || spines == 0 || hosts_per_leaf == 0 {
            return Err(TopologyError::EmptyLeafSpine);
        }
        let hosts = leaves * hosts_per_leaf;
        let mut nodes = vec![Node::Host; hosts];
        nodes.extend(std::iter::repeat_n(Node::Switch { tier: 0 }, leaves));
        nodes.extend(std::iter::repeat_n(Node::Switch { tier: 1 }, spines));
        let mut cables = Vec::new();
        for host in 0..hosts {
            cables.push((host, hosts + host / hosts_per_leaf));
        }
        for l in 0..leaves {
            for s in 0..spines {
                cables.push((hosts + l, hosts + leaves + s));
            }
        }
        let name = format!("leafspine:leaves={leaves},spines={spines},hosts={hosts_per_leaf}");
        Ok(Topology::new(name, nodes, &cables, spec))
    }

    /// A leaf-spine whose leaves have `oversub` times more host capacity
    /// than uplink capacity: each leaf-spine link runs at `hosts_per_leaf
    /// x rate / (spines x oversub)`.
    pub fn leaf_spine_oversubscribed(
        leaves: usize,
        spines: usize,
        hosts_per_leaf: usize,
        oversub: usize,
        spec: LinkSpec,
    ) -> Result<Topology, TopologyError> {
        let mut topo = Topology::leaf_spine(leaves, spines, hosts_per_leaf, spec)?;
        let uplink =
            spec.rate.0 as u128 * hosts_per_leaf as u128 / (spines * oversub.max(1)) as u128;
        let uplink = Rate(u64::try_from(uplink).map_err(|_| TopologyError::UplinkOverflow)?);
        if oversub == 0 || uplink.0 == 0 {
            return Err(TopologyError::Oversubscription(oversub));
        }
        let hosts = topo.hosts;
        for l in topo
            .links
            .iter_mut()
            .filter(|l| l.from >= hosts && l.to >= hosts)
        {
            l.rate = uplink;
        }
        topo.name += &format!(",oversub={oversub}");
        Ok(topo)
    }

    /// The tier of a link: 0 for a host's link, else 1 + the lower tier of
    /// the two switches it joins (fat-tree: ToR-aggregation 1,
    /// aggregation-core 2; leaf-spine: leaf-spine 1).
    pub fn link_tier(&self, l: LinkId) -> usize {
        let tier = |n: NodeId| match self.nodes[n] {
            Node::Host => None,
            Node::Switch { tier } => Some(tier as usize),
        };
        let link = &self.links[l];
        match (tier(link.from), tier(link.to)) {
            (Some(a), Some(b)) => 1 + a.min(b),
            _ => 0,
        }
    }

    /// Sets the rate of every link of tier `t` to `rates[t]` (the last rate
    /// for tiers beyond the list): per-tier link rates.
    pub fn set_tier_rates(&mut self, rates: &[Rate]) -> Result<(), TopologyError> {
        let last = *rates.last().ok_or(TopologyError::NoTierRates)?;
        for l in 0..self.links.len() {
            self.links[l].rate = rates.get(self.link_tier(l)).copied().unwrap_or(last);
        }
        Ok(())
    }

    /// Every host on one switch: the testbed (`shoal testbed`).
    pub fn single_switch(hosts: usize, spec: LinkSpec) -> Result<Topology, TopologyError> {
        if hosts == 0 {
            return Err(TopologyError::EmptyStar);
        }
        let mut nodes = vec![Node::Host; hosts];
        nodes.push(Node::Switch { tier: 0 });
        let cables: Vec<_> = (0..hosts).map(|h| (h, hosts)).collect();
        Ok(Topology::new(
            format!("star:hosts={hosts}"),
            nodes,
            &cables,
            spec,
        ))
    }

    /// Parses "fattree:k=16", "leafspine:leaves=4,spines=2,hosts=8" or
    /// "star:hosts=8".
    pub fn parse(s: &str, spec: LinkSpec) -> Result<Topology, TopologyError> {
        let (kind, args) = s.split_once(':').unwrap_or((s, ""));
        let mut params = Vec::new();
        let in_spec = |problem| TopologyError::Spec {
            spec: s.to_string(),
            problem,
        };
        for kv in args.split(',').filter(|kv| !kv.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| in_spec(SpecProblem::NotKeyValue(kv.to_string())))?;
            let v: usize = v.trim().parse().map_err(|_| {
                in_spec(SpecProblem::NotWholeNumber {
                    key: k.to_string(),
                    value: v.to_string(),
                })
            })?;
            params.push((k.trim().to_string(), v));
        }
        let mut take = |key: &str| -> Option<usize> {
            let i = params.iter().position(|(k, _)| k == key)?;
            Some(params.remove(i).1)
        };
        let mut need = |key: &'static str| take(key).ok_or(in_spec(SpecProblem::Missing(key)));
        let topo = match kind.trim() {
            "fattree" => Topology::fat_tree(need("k")?, spec)?,
            "leafspine" => {
                let (leaves, spines, hosts) = (need("leaves")?, need("spines")?, need("hosts")?);
                match take("oversub") {
                    Some(o) => Topology::leaf_spine_oversubscribed(leaves, spines, hosts, o, spec)?,
                    None => Topology::leaf_spine(leaves, spines, hosts, spec)?,
                }
            }
            "star" => Topology::single_switch(need("hosts")?, spec)?,
            other => return Err(TopologyError::UnknownKind(other.to_string())),
        };
        if let Some((k, _)) = params.first() {
            return Err(in_spec(SpecProblem::UnknownParameter(k.clone())));
        }
        Ok(topo)
    }
}

/// A topology that cannot be built: a spec string that does not parse, or
/// parameters the shape refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopologyError {
    /// What is wrong with the spec string `spec` ("fattree:k=eight").
    Spec { spec: String, problem: SpecProblem },
    /// A kind other than fattree, leafspine and star.
    UnknownKind(String),
    /// A fat-tree's k must be even and >= 2.
    FatTreeK(usize),
    /// A leaf-spine with no leaves, spines or hosts.
    EmptyLeafSpine,
    /// An oversubscription of 0, or one that leaves the uplinks no capacity.
    Oversubscription(usize),
    /// An uplink rate beyond u64 bit/s.
    UplinkOverflow,
    /// A star with no host.
    EmptyStar,
    /// `set_tier_rates` with an empty list.
    NoTierRates,
}

/// What is wrong with a topology spec string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecProblem {
    /// A parameter without `=`.
    NotKeyValue(String),
    /// A parameter whose value is not a whole number.
    NotWholeNumber { key: String, value: String },
    /// A parameter the kind needs that is not given.
    Missing(&'static str),
    /// A parameter the kind does not take.
    UnknownParameter(String),
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::Spec { spec, problem } => match problem {
                SpecProblem::NotKeyValue(kv) => {
                    write!(f, "topology '{spec}': '{kv}' is not key=value")
                }
                SpecProblem::NotWholeNumber { key, value } => {
                    write!(f, "topology '{spec}': {key}={value} is not a whole number")
                }
                SpecProblem::Missing(key) => write!(f, "topology '{spec}' needs {key}=N"),
                SpecProblem::UnknownParameter(key) => {
                    write!(f, "topology '{spec}': unknown parameter '{key}'")
                }
            },
            TopologyError::UnknownKind(kind) => write!(
                f,
                "unknown topology '{kind}'; use fattree:k=N, leafspine:leaves=L,spines=S,hosts=H or star:hosts=N"
            ),
            TopologyError::FatTreeK(k) => write!(f, "fat-tree k must be even and >= 2, got {k}"),
            TopologyError::EmptyLeafSpine => {
                write!(f, "leaf-spine needs leaves, spines and hosts >= 1")
            }
            TopologyError::Oversubscription(oversub) => write!(
                f,
                "leaf-spine oversub={oversub}: must be >= 1 and leave the uplinks some capacity"
            ),
            TopologyError::UplinkOverflow => write!(f, "leaf-spine uplink rate overflows"),
            TopologyError::EmptyStar => write!(f, "a star needs at least one host"),
            TopologyError::NoTierRates => write!(f, "tier rates: give at least one rate"),
        }
    }
}

impl std::error::Error for TopologyError {}

/// SplitMix64 finaliser: a cheap, well-mixed deterministic hash.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversubscribed_leaf_spine_has_slower_uplinks() {
        let t = Topology::parse(
            "leafspine:leaves=4,spines=2,hosts=8,oversub=4",
            LinkSpec::default(),
        )
        .unwrap();
        assert_eq!(t.name, "leafspine:leaves=4,spines=2,hosts=8,oversub=4");
        // 8 hosts x 10 Gb/s over 2 spines, 4:1: 10 Gb/s per uplink.
        let uplinks: Vec<_> = (0..t.links.len())
            .filter(|&l| t.link_tier(l) == 1)
            .collect();
        assert_eq!(uplinks.len(), 2 * 4 * 2);
        assert!(uplinks.iter().all(|&l| t.links[l].rate == Rate::gbit(10)));
        let t = Topology::parse(
            "leafspine:leaves=4,spines=2,hosts=8,oversub=1",
            LinkSpec::default(),
        )
        .unwrap();
        assert!(uplinks.iter().all(|&l| t.links[l].rate == Rate::gbit(40)));
        let err = Topology::parse(
            "leafspine:leaves=4,spines=2,hosts=8,oversub=0",
            LinkSpec::default(),
        )
        .unwrap_err();
        assert_eq!(err, TopologyError::Oversubscription(0));
    }

    #[test]
    fn tier_rates_set_each_tier_of_a_fat_tree() {
        let mut t = Topology::fat_tree(4, LinkSpec::default()).unwrap();
        t.set_tier_rates(&[Rate::gbit(10), Rate::gbit(40), Rate::gbit(100)])
            .unwrap();
        let rate_of = |tier| {
            let mut r: Vec<_> = (0..t.links.len())
                .filter(|&l| t.link_tier(l) == tier)
                .map(|l| t.links[l].rate)
                .collect();
            r.dedup();
            (
                r,
                (0..t.links.len())
                    .filter(|&l| t.link_tier(l) == tier)
                    .count(),
            )
        };
        // 16 host cables, 16 ToR-aggregation, 16 aggregation-core; two directions each.
        assert_eq!(rate_of(0), (vec![Rate::gbit(10)], 32));
        assert_eq!(rate_of(1), (vec![Rate::gbit(40)], 32));
        assert_eq!(rate_of(2), (vec![Rate::gbit(100)], 32));
        assert_eq!(t.set_tier_rates(&[]), Err(TopologyError::NoTierRates));
    }

    #[test]
    fn fat_tree_k16_has_the_papers_sizes() {
        let t = Topology::fat_tree(16, LinkSpec::default()).unwrap();
        assert_eq!(t.hosts(), 1024);
        let tier = |x| {
            t.nodes
                .iter()
                .filter(|n| **n == Node::Switch { tier: x })
                .count()
        };
        assert_eq!((tier(0), tier(1), tier(2)), (128, 128, 64));
        // Non-blocking: every switch has k ports.
        for n in t.hosts()..t.nodes.len() {
            let ports = t.out_links(n).len();
            assert_eq!(ports, 16, "switch {n}");
        }
    }

    #[test]
    fn fat_tree_path_counts() {
        let t = Topology::fat_tree(4, LinkSpec::default()).unwrap();
        assert_eq!(t.shortest_paths(0, 1).len(), 1); // same ToR
        assert_eq!(t.shortest_paths(0, 2).len(), 2); // same pod
        assert_eq!(t.shortest_paths(0, 15).len(), 4); // across pods
        assert_eq!(t.hops(0, 15), 6);
        for flow in 0..20 {
            let r = t.ecmp_route(0, 15, flow);
            assert!(t.shortest_paths(0, 15).contains(&r));
            assert_eq!(r, t.ecmp_route(0, 15, flow), "deterministic");
        }
        let distinct: std::collections::BTreeSet<_> =
            (0..64).map(|f| t.ecmp_route(0, 15, f)).collect();
        assert_eq!(distinct.len(), 4, "ECMP spreads flows over all paths");
    }

    #[test]
    fn parses_topologies_and_names_errors() {
        let s = LinkSpec::default();
        assert_eq!(Topology::parse("star:hosts=8", s).unwrap().hosts(), 8);
        let ls = Topology::parse("leafspine:leaves=4,spines=2,hosts=8", s).unwrap();
        assert_eq!((ls.hosts(), ls.switches()), (32, 6));
        assert_eq!(Topology::parse("fattree:k=8", s).unwrap().hosts(), 128);
        let err = Topology::parse("fattree:k=7", s).unwrap_err();
        assert_eq!(err, TopologyError::FatTreeK(7));
        assert_eq!(err.to_string(), "fat-tree k must be even and >= 2, got 7");
        let err = Topology::parse("fattree", s).unwrap_err();
        assert_eq!(
            err,
            TopologyError::Spec {
                spec: "fattree".into(),
                problem: SpecProblem::Missing("k")
            }
        );
        assert_eq!(err.to_string(), "topology 'fattree' needs k=N");
        let err = Topology::parse("ring:n=3", s).unwrap_err();
        assert_eq!(err, TopologyError::UnknownKind("ring".into()));
        assert!(err
            .to_string()
            .starts_with("unknown topology 'ring'; use fattree:k=N"));
        let err = Topology::parse("star:hosts=4,x=1", s).unwrap_err();
        assert!(matches!(
            &err,
            TopologyError::Spec { problem: SpecProblem::UnknownParameter(k), .. } if k == "x"
        ));
        assert_eq!(
            err.to_string(),
            "topology 'star:hosts=4,x=1': unknown parameter 'x'"
        );
        let err = Topology::parse("star:hosts=four", s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topology 'star:hosts=four': hosts=four is not a whole number"
        );
        let err = Topology::parse("star:hosts", s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topology 'star:hosts': 'hosts' is not key=value"
        );
    }
}
