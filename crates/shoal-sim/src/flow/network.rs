//! The topology as the flow engine sees it: link capacities, and for a
//! host pair an ECMP route with the delay a fluid model adds on top of
//! the transmission time.

use crate::topology::{mix, Topology};
use crate::units::{seconds, Time};

use crate::packet::PacketConfig;

/// Bytes of one full packet, used for the store-and-forward delay.
pub const PACKET_BYTES: u64 = 1500;

/// Bytes a transfer of `payload` puts on the wire: the packet engine's
/// header per MSS-sized packet (40 B per 1460 B by default), so both
/// engines charge the same overhead.
pub fn wire_bytes(payload: u64) -> u64 {
    let cfg = PacketConfig::default();
    payload + payload.div_ceil(cfg.mss() as u64) * cfg.header as u64
}

/// Capacity of every directed link, bit/s, by link id.
pub fn link_capacities(topo: &Topology) -> Vec<f64> {
    topo.links.iter().map(|l| l.rate.bits_per_s()).collect()
}

/// A route for the flow engine: link ids plus the delay between the last
/// bit leaving the source and it arriving — propagation on every link and
/// the store-and-forward of one packet at every switch, which is what a
/// packet network adds to a fluid transfer of the same bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub links: Vec<u32>,
    pub latency_s: f64,
}

/// The ECMP route of flow `key` from host `src` to host `dst` (empty and
/// zero-latency when they are the same host).
pub fn route(topo: &Topology, src: usize, dst: usize, key: u64) -> Route {
    if src == dst {
        return Route {
            links: Vec::new(),
            latency_s: 0.0,
        };
    }
    let mut links = Vec::with_capacity(8);
    let mut delay: Time = 0;
    let mut node = src;
    while node != dst {
        let l = ecmp_hop(topo, node, dst, key);
        let link = &topo.links[l];
        delay += link.latency;
        if node != src {
            delay += link.rate.serialize(PACKET_BYTES);
        }
        links.push(l as u32);
        node = link.to;
    }
    Route {
        links,
        latency_s: seconds(delay),
    }
}

/// The link [`Topology::ecmp_route`] takes from `node` towards `dst` for
/// flow `key` (same hash, so both engines route a flow alike), without
/// collecting the candidates.
fn ecmp_hop(topo: &Topology, node: usize, dst: usize, key: u64) -> usize {
    let candidates = topo.next_hops(node, dst).count();
    assert!(candidates > 0, "host {dst} unreachable from node {node}");
    let pick = mix(key ^ mix(node as u64)) % candidates as u64;
    topo.next_hops(node, dst)
        .nth(pick as usize)
        .expect("pick < candidates")
}
