//! Profile → analyze → plan, as pure functions over bounded memory, costed
//! in *work units* (profile entries taken, vertices and edges visited)
//! rather than time, so the simulator and a live run do the same work.
//!
//! - [`Profile`]: the bounded buffer of [`ProfileEntry`]s (32 bytes each;
//!   the paper's entries averaged 40).
//! - [`Analyzer`]: one directed access graph per stream. A vertex is a
//!   block range as requested; an edge `u -> v` counts transitions from one
//!   request of the stream to the next, each worth [`WEIGHT_UNIT`] when the
//!   gap is at most the think time and `WEIGHT_UNIT * think / gap` when
//!   longer (the paper's attenuation for long think times). Memory is
//!   bounded by halving every weight and dropping those that reach zero
//!   whenever the vertex or edge cap is passed.
//! - [`master_graph`]: the streams' graphs merged into one whose vertices
//!   are disjoint *atoms*: every boundary of every range splits the ranges
//!   it falls in, a range becomes the chain of its atoms (linked by edges
//!   weighted with the range's own access count), and an edge `u -> v`
//!   links the last atom of `u` to the first of `v`.
//! - [`plan`]: the paper's greedy placement over the master graph.

use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The weight of one transition within the think time.
pub const WEIGHT_UNIT: u64 = 1000;

/// A half-open range of volume blocks.
pub type Range = (u64, u64);

/// One profiled request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileEntry {
    /// When it arrived (virtual ns).
    pub time_ns: u64,
    /// First volume block.
    pub block: u64,
    /// Blocks touched.
    pub blocks: u32,
    /// Its stream.
    pub stream: u32,
    /// A read (else a write, trim or write-zeroes): only reads' home
    /// neighbours pad a plan (`plan_streams`' `pad_blocks`).
    pub read: bool,
}
const _: () = assert!(std::mem::size_of::<ProfileEntry>() <= 40);

/// The bounded profile buffer.
#[derive(Debug)]
pub struct Profile {
    entries: VecDeque<ProfileEntry>,
    entries_max: usize,
    /// Entries refused because the buffer was full.
    pub dropped_count: u64,
    /// Entries ever recorded.
    pub recorded_count: u64,
}

impl Profile {
    /// A buffer of at most `entries_max` entries, allocated now.
    pub fn new(entries_max: usize) -> Profile {
        assert!(entries_max > 0);
        Profile {
            entries: VecDeque::with_capacity(entries_max),
            entries_max,
            dropped_count: 0,
            recorded_count: 0,
        }
    }

    /// Records an entry, or counts it dropped when full.
    pub fn record(&mut self, e: ProfileEntry) {
        if self.entries.len() == self.entries_max {
            self.dropped_count += 1;
            return;
        }
        self.entries.push_back(e);
        self.recorded_count += 1;
    }

    /// Entries waiting for analysis.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes up to `n` of the oldest entries.
    pub fn take(&mut self, n: usize) -> impl Iterator<Item = ProfileEntry> + '_ {
        let n = n.min(self.entries.len());
        self.entries.drain(..n)
    }
}

/// One stream's access graph.
#[derive(Debug, Default)]
struct StreamGraph {
    last: Option<(Range, u64)>,
    /// The request before `last`.
    before_last: Option<(Range, u64)>,
    /// Access count of each range, in weight units.
    vertices: BTreeMap<Range, u64>,
    edges: BTreeMap<(Range, Range), u64>,
    /// *Skip edges*: from each request to the one after next (`a → c` of
    /// `a, b, c`), weighted as edges. The plan follows one only where no
    /// edge leads on: a stream that reads a block placed elsewhere (a
    /// library another program's sequence took) goes on after it.
    skips: BTreeMap<(Range, Range), u64>,
    /// The ranges a write of the stream touched (a subset of `vertices`):
    /// the plan pads none of them with their neighbours, where the next
    /// writes go (mapped, each first write to a clean copy waits for a
    /// journal block and goes to the region, apart from the rest).
    written: BTreeSet<Range>,
    /// The written ranges the stream also read (`plan_written = false`
    /// leaves out only the others).
    read_written: BTreeSet<Range>,
    /// The stream's requests so far (its clock for `first_seen`).
    requests_count: u64,
    /// When each vertex was first seen and each edge was taken (the
    /// stream's request number; an edge's first [`SIGHTINGS_MAX`] times):
    /// the time order of [`time_order`].
    first_seen: FxHashMap<Range, u64>,
    edge_seen: FxHashMap<(Range, Range), Vec<u64>>,
}

/// The times an edge is taken that [`time_order`] remembers: a path
/// several programs on one connection take (a library's directory, its
/// inode table block) is laid out again in each program's sequence up to
/// this many times (and `copies_max`).
pub const SIGHTINGS_MAX: usize = 8;

/// Limits of the analyzer.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Think time in ns: slower transitions count less.
    pub think_ns: u64,
    /// Most vertices over all streams.
    pub vertices_max: usize,
    /// Most edges over all streams.
    pub edges_max: usize,
    /// Keep the sightings a time-ordered plan needs (`first_seen`,
    /// `edge_seen`; `plan_time_order`): off, none is kept (up to about
    /// 120 B an edge saved) and [`plan_streams`] takes the graph's order.
    pub sightings: bool,
}

/// Per-stream access graphs, built incrementally from the profile.
#[derive(Debug)]
pub struct Analyzer {
    limits: Limits,
    streams: BTreeMap<u32, StreamGraph>,
    vertex_count: usize,
    edge_count: usize,
    /// Work units spent so far (entries taken, vertices and edges visited).
    pub units: u64,
}

impl Analyzer {
    /// An empty analyzer.
    pub fn new(limits: Limits) -> Analyzer {
        assert!(limits.think_ns > 0 && limits.vertices_max > 0 && limits.edges_max > 0);
        Analyzer { limits, streams: BTreeMap::new(), vertex_count: 0, edge_count: 0, units: 0 }
    }

    /// Vertices over all stream graphs.
    pub fn vertex_count(&self) -> usize {
        self.vertex_count
    }

    /// Edges over all stream graphs.
    pub fn edge_count(&self) -> usize {
        self.edge_count
    }

    /// Stream graphs.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// The weight of a transition after a gap of `gap_ns`.
    fn weight(&self, gap_ns: u64) -> u64 {
        if gap_ns <= self.limits.think_ns {
            WEIGHT_UNIT
        } else {
            (u128::from(WEIGHT_UNIT) * u128::from(self.limits.think_ns) / u128::from(gap_ns)) as u64
        }
    }

    /// Adds one profiled request to its stream's graph.
    pub fn add(&mut self, e: ProfileEntry) {
        assert!(e.blocks > 0);
        self.units += 1;
        let range = (e.block, e.block + u64::from(e.blocks));
        let g = self.streams.entry(e.stream).or_default();
        let fresh = !g.vertices.contains_key(&range);
        *g.vertices.entry(range).or_insert(0) += WEIGHT_UNIT;
        let seen = g.requests_count;
        g.requests_count += 1;
        let sightings = self.limits.sightings;
        if fresh && sightings {
            g.first_seen.insert(range, seen);
        }
        self.vertex_count += usize::from(fresh);
        // A range both read and written (in either order: a vertex that
        // was there and not written was read).
        let was_written = g.written.contains(&range);
        if (e.read && was_written) || (!e.read && !was_written && !fresh) {
            g.read_written.insert(range);
        }
        if !e.read {
            g.written.insert(range);
        }
        // A request repeating the last one changes neither edge.
        if g.last.is_some_and(|(prev, _)| prev == range) {
            g.last = Some((range, e.time_ns));
            return self.enforce_caps();
        }
        let before = std::mem::replace(&mut g.before_last, g.last.replace((range, e.time_ns)));
        let last = g.before_last;
        // A request whose vertex faded away since (halving) links nothing.
        let g = self.streams.get(&e.stream).expect("present");
        let weights = [last, before].map(|p| {
            p.filter(|(prev, _)| *prev != range && g.vertices.contains_key(prev))
                .map(|(prev, t)| (prev, self.weight(e.time_ns.saturating_sub(t))))
        });
        let g = self.streams.get_mut(&e.stream).expect("present");
        for (k, edge) in weights.into_iter().enumerate() {
            let Some((prev, w)) = edge.filter(|(_, w)| *w > 0) else { continue };
            let map = if k == 0 { &mut g.edges } else { &mut g.skips };
            let slot = map.entry((prev, range)).or_insert(0);
            self.edge_count += usize::from(*slot == 0);
            if k == 0 && sightings {
                let times = g.edge_seen.entry((prev, range)).or_default();
                if times.len() < SIGHTINGS_MAX {
                    times.push(seen);
                }
            }
            *slot += w;
        }
        self.enforce_caps();
    }

    fn enforce_caps(&mut self) {
        while self.vertex_count > self.limits.vertices_max || self.edge_count > self.limits.edges_max {
            self.halve();
        }
    }

    /// Halves every weight and drops what reaches zero: older patterns fade
    /// and memory stays under the caps.
    pub fn halve(&mut self) {
        let (mut vertices, mut edges) = (0, 0);
        for g in self.streams.values_mut() {
            self.units += (g.vertices.len() + g.edges.len()) as u64;
            g.vertices.retain(|_, w| {
                *w /= 2;
                *w > 0
            });
            self.units += g.skips.len() as u64;
            for map in [&mut g.edges, &mut g.skips] {
                // A vertex that faded away takes its edges with it.
                map.retain(|(a, b), w| {
                    *w /= 2;
                    *w > 0 && g.vertices.contains_key(a) && g.vertices.contains_key(b)
                });
            }
            g.written.retain(|r| g.vertices.contains_key(r));
            g.read_written.retain(|r| g.vertices.contains_key(r));
            g.first_seen.retain(|r, _| g.vertices.contains_key(r));
            g.edge_seen.retain(|e, _| g.edges.contains_key(e));
            vertices += g.vertices.len();
            edges += g.edges.len() + g.skips.len();
        }
        self.streams.retain(|_, g| !g.vertices.is_empty());
        self.vertex_count = vertices;
        self.edge_count = edges;
    }
}

/// The merged graph: disjoint atoms and weighted directed edges.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MasterGraph {
    /// Atoms in block order.
    pub atoms: Vec<Range>,
    /// `(from atom, to atom) -> weight`, sorted.
    pub edges: Vec<((u32, u32), u64)>,
    /// Skip edges (see `StreamGraph::skips`), the same way.
    pub skips: Vec<((u32, u32), u64)>,
}

/// Merges every stream graph of `a` into one master graph (work units are
/// added to `units`).
pub fn master_graph(a: &Analyzer, units: &mut u64) -> MasterGraph {
    let mut bounds: Vec<u64> = Vec::with_capacity(a.vertex_count * 2);
    for g in a.streams.values() {
        for &(s, e) in g.vertices.keys() {
            bounds.push(s);
            bounds.push(e);
        }
    }
    bounds.sort_unstable();
    bounds.dedup();
    *units += bounds.len() as u64;
    let idx = |b: u64| bounds.binary_search(&b).expect("a boundary") as u32;
    // Elementary intervals between bounds; only covered ones become atoms.
    let mut covered = vec![false; bounds.len().saturating_sub(1)];
    let mut edges: FxHashMap<(u32, u32), u64> = FxHashMap::default();
    let mut skips: FxHashMap<(u32, u32), u64> = FxHashMap::default();
    for g in a.streams.values() {
        for (&(s, e), &w) in &g.vertices {
            let (i, j) = (idx(s), idx(e));
            *units += u64::from(j - i);
            for k in i..j {
                covered[k as usize] = true;
                if k + 1 < j {
                    *edges.entry((k, k + 1)).or_insert(0) += w;
                }
            }
        }
        for (&((_, ue), (vs, _)), &w) in &g.edges {
            *units += 1;
            *edges.entry((idx(ue) - 1, idx(vs))).or_insert(0) += w;
        }
        for (&((_, ue), (vs, _)), &w) in &g.skips {
            *units += 1;
            *skips.entry((idx(ue) - 1, idx(vs))).or_insert(0) += w;
        }
    }
    // Renumber covered intervals densely.
    let mut number = vec![u32::MAX; covered.len()];
    let mut atoms = Vec::new();
    for (k, &c) in covered.iter().enumerate() {
        if c {
            number[k] = atoms.len() as u32;
            atoms.push((bounds[k], bounds[k + 1]));
        }
    }
    let renumber = |map: FxHashMap<(u32, u32), u64>| {
        let mut v: Vec<((u32, u32), u64)> =
            map.into_iter().map(|((x, y), w)| ((number[x as usize], number[y as usize]), w)).collect();
        v.sort_unstable();
        assert!(v.iter().all(|((x, y), _)| *x != u32::MAX && *y != u32::MAX), "edges join atoms");
        v
    };
    MasterGraph { atoms, edges: renumber(edges), skips: renumber(skips) }
}

/// The paper's greedy placement: start at the most connected unplaced atom;
/// repeatedly place the most connected unplaced neighbour of the sequence's
/// ends, after the tail (an outgoing edge) or before the head (incoming);
/// when neither end has an edge of at least `weight_min`, start a new
/// sequence; stop when `capacity_blocks` are placed or no atom left has a
/// connectivity of at least `weight_min`. Returns block ranges in their
/// order in the region (a last range may be cut to fit).
///
/// With `copies_max > 1` an atom may be placed more than once (at most
/// `copies_max` times, never twice in one sequence): when an end's
/// heaviest edge leads to an atom another sequence holds (a shared
/// library), and a walk from there over placed atoms, each step confirmed
/// by the stream's skip edge from the atom before (or by the next atom
/// continuing the same range), reaches an unplaced atom within
/// [`COPY_PATH_MAX`] steps, copies of the walked atoms go into this
/// sequence, then the unplaced one: each stream reads on in one place.
pub fn plan(
    m: &MasterGraph,
    capacity_blocks: u64,
    weight_min: u64,
    copies_max: u32,
    follow_streams: bool,
    units: &mut u64,
) -> Vec<Range> {
    assert!(copies_max >= 1);
    let n = m.atoms.len();
    let mut out_adj: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
    let mut in_adj: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
    let mut out_skip: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
    let mut in_skip: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
    let mut conn = vec![0u64; n];
    for &((x, y), w) in &m.edges {
        if x == y {
            continue;
        }
        out_adj[x as usize].push((y, w));
        in_adj[y as usize].push((x, w));
        conn[x as usize] += w;
        conn[y as usize] += w;
    }
    for &((x, y), w) in m.skips.iter().filter(|((x, y), _)| x != y) {
        out_skip[x as usize].push((y, w));
        in_skip[y as usize].push((x, w));
    }
    *units += (m.edges.len() + m.skips.len()) as u64;
    let skip_set: FxHashSet<(u32, u32)> = if copies_max > 1 || follow_streams {
        m.skips.iter().map(|&(k, _)| k).collect()
    } else {
        Default::default()
    };
    let follows =
        |forward: bool, prev: u32, cur: u32, c: u32| follows(&m.atoms, &skip_set, forward, prev, cur, c);
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&a| (std::cmp::Reverse(conn[a as usize]), a));
    let mut placed = vec![false; n];
    // Placements of each atom, and the sequence that placed it last.
    let mut copies = vec![0u32; n];
    let mut last_seq = vec![u32::MAX; n];
    let mut left = capacity_blocks;
    let mut out: Vec<Range> = Vec::new();
    // The heaviest unplaced neighbour; with `follow_streams`, one the
    // stream's skip edge confirms (`consistent`) first: `(confirmed, v, w)`.
    let best =
        |adj: &Vec<(u32, u64)>, placed: &Vec<bool>, consistent: &dyn Fn(u32) -> bool, units: &mut u64| {
            *units += adj.len() as u64;
            adj.iter()
                .filter(|(v, w)| !placed[*v as usize] && *w >= weight_min)
                .map(|&(v, w)| (follow_streams && consistent(v), v, w))
                .max_by_key(|&(c, v, w)| (c, w, std::cmp::Reverse(v)))
        };
    for (seq_id, &seed) in order.iter().enumerate() {
        let seq_id = seq_id as u32;
        if left == 0 || conn[seed as usize] < weight_min {
            break;
        }
        if placed[seed as usize] {
            continue;
        }
        placed[seed as usize] = true;
        copies[seed as usize] += 1;
        last_seq[seed as usize] = seq_id;
        let mut seq: VecDeque<u32> = VecDeque::from([seed]);
        let mut blocks = len(m.atoms[seed as usize]);
        while blocks < left {
            let (head, tail) = (*seq.front().expect("non-empty"), *seq.back().expect("non-empty"));
            // An end with no edge left follows its skip edges; an edge
            // beats a skip edge, then the heavier wins; a copy path wins
            // over an edge to an unplaced atom when its first edge is heavier.
            // Ranks: 2 an edge the stream's skip edge confirms (or a copy
            // path; with `follow_streams`), 1 an edge, 0 a skip edge.
            let end = |forward: bool, a: u32, units: &mut u64| {
                let (adj, skip, before) = if forward {
                    (&out_adj, &out_skip, seq.len().checked_sub(2).map(|i| seq[i]))
                } else {
                    (&in_adj, &in_skip, seq.get(1).copied())
                };
                let consistent = |v: u32| before.is_some_and(|b| follows(forward, b, a, v));
                best(&adj[a as usize], &placed, &consistent, units)
                    .map(|(c, v, w)| (1 + u32::from(c), w, v))
                    .or_else(|| {
                        best(&skip[a as usize], &placed, &|_| false, units).map(|(_, v, w)| (0, w, v))
                    })
            };
            let path = |forward: bool, units: &mut u64| {
                if copies_max == 1 {
                    return None;
                }
                let (a, before, adj) = if forward {
                    (tail, seq.len().checked_sub(2).map(|i| seq[i]), &out_adj)
                } else {
                    (head, seq.get(1).copied(), &in_adj)
                };
                let walk = CopyWalk {
                    atoms: &m.atoms,
                    adj,
                    skips: &skip_set,
                    forward,
                    placed: &placed,
                    copies: &copies,
                    last_seq: &last_seq,
                    copies_max,
                    weight_min,
                    seq_id,
                };
                walk.from(a, before, units)
            };
            let o = end(true, tail, units);
            let i = end(false, head, units);
            let po = path(true, units);
            let pi = path(false, units);
            // The heaviest of: an edge to an unplaced atom, a copy path
            // (weighed by its first edge); then skip edges.
            let mut choice: Option<((u32, u64), bool, Vec<u32>)> = None;
            for (cand, after) in [(o, true), (i, false)] {
                if let Some((k, w, v)) = cand {
                    if choice.as_ref().is_none_or(|c| (k, w) > c.0) {
                        choice = Some(((k, w), after, vec![v]));
                    }
                }
            }
            for (cand, after) in [(po, true), (pi, false)] {
                if let Some((w, p)) = cand {
                    let rank = 1 + u32::from(follow_streams);
                    if choice.as_ref().is_none_or(|c| (rank, w) > c.0) {
                        choice = Some(((rank, w), after, p));
                    }
                }
            }
            let Some((_, after, vs)) = choice else { break };
            for v in vs {
                placed[v as usize] = true;
                copies[v as usize] += 1;
                last_seq[v as usize] = seq_id;
                blocks += len(m.atoms[v as usize]);
                if after {
                    seq.push_back(v);
                } else {
                    seq.push_front(v);
                }
            }
        }
        for a in seq {
            let (s, e) = m.atoms[a as usize];
            let take = (e - s).min(left);
            if take == 0 {
                break;
            }
            out.push((s, s + take));
            left -= take;
        }
    }
    out
}

/// A stream's next request may start this many blocks past where its last
/// one ended in the region and still count as read on (the drive's
/// read-ahead covers a short skip forward; see [`plan_streams`]).
pub const FOLLOW_AHEAD_BLOCKS: u64 = 64;

/// In a time-ordered stream plan ([`time_order`]), a request laid out
/// elsewhere (not just ahead) is read there when the stream's next
/// requests go on along that layout for at least this many requests (a
/// rerun: one seek there and one back, spread over them); a shorter path
/// is laid out again in the stream's sequence (two seeks saved for a few
/// copied blocks).
pub const JOIN_MIN: usize = 32;

/// What [`plan_streams`] is asked for.
#[derive(Clone, Copy, Debug)]
pub struct StreamPlan {
    /// The region's slots.
    pub capacity_blocks: u64,
    /// Requests and edges below this weight are left out.
    pub weight_min: u64,
    /// Copies of a block at most.
    pub copies_max: u32,
    /// Home neighbours laid out around each read request (`plan_pad_blocks`).
    pub pad_blocks: u64,
    /// Ranges a stream only wrote are laid out too (`plan_written`).
    pub place_written: bool,
    /// A stream that leaves the sequence it follows gets the sequence
    /// laid out anew with its requests where it read them (`plan_relay`).
    pub relay: bool,
    /// Each stream's requests in the order it took its transitions
    /// ([`time_order`], `plan_time_order`) instead of the graph's
    /// ([`stream_order`]).
    pub time_order: bool,
}

/// The stream-sequence plan (`plan_streams`): each stream's requests, in
/// the order its graph says ([`stream_order`]), are laid out one after the
/// other, each request's blocks together, streams in id order (first seen
/// first). A request found at most [`FOLLOW_AHEAD_BLOCKS`] past where the
/// stream's last one ended (an earlier run of the same program laid it
/// out) takes no room; otherwise its blocks are appended, as extra copies
/// of blocks already placed (at most `copies_max` copies of a block; a
/// request that would need more is not copied and the stream goes on from
/// where it lies). Requests and edges below `weight_min` are left out.
///
/// With `pad_blocks > 0` the home neighbours of every request the plan
/// takes (laid out or found laid out) that the stream did not write, up
/// to `pad_blocks` before and after it, that no copy holds are laid out
/// too, after every stream's sequence, in home order: on a file
/// system that keeps a file's blocks together they are the rest of the
/// file, so a later read of a part the profile never saw (a run that
/// skipped it) is served from the region, a short seek from the stream's
/// sequence instead of one out to home and back.
///
/// With `place_written` false, no range the stream wrote and never read
/// is laid out (nor found laid out): its writes go home with the rest of
/// the stream's writes (`plan_written`, `docs/opt.md`).
/// Returns block ranges in region order, cut at `capacity_blocks`.
pub fn plan_streams(a: &Analyzer, o: &StreamPlan, units: &mut u64) -> Vec<Range> {
    let StreamPlan {
        capacity_blocks,
        weight_min,
        copies_max,
        pad_blocks,
        place_written,
        relay,
        time_order: by_time,
    } = *o;
    // An analyzer that kept no sightings gives the graph's order.
    let by_time = by_time && a.limits.sightings;
    // Where each placed block is (its slots, in placement order).
    let mut at: FxHashMap<u64, Vec<u64>> = FxHashMap::default();
    let mut out: Vec<Range> = Vec::new();
    let mut pos = 0u64;
    // The home block at each position of the plan.
    let mut layout: Vec<u64> = Vec::new();
    // Home neighbours of the requests laid out (`pad_blocks`).
    let mut neighbours: BTreeSet<u64> = BTreeSet::new();
    // The first slot from which all of `r`'s blocks lie in a row, among
    // the copies of its first block that `ok` accepts.
    let in_row = |at: &FxHashMap<u64, Vec<u64>>, (b, e): Range, ok: &dyn Fn(u64) -> bool| {
        let starts = at.get(&b)?;
        let fits =
            |&s: &u64| ok(s) && (b + 1..e).all(|x| at.get(&x).is_some_and(|v| v.contains(&(s + (x - b)))));
        if relay {
            starts.iter().rev().copied().find(fits)
        } else {
            starts.iter().copied().find(fits)
        }
    };
    // Where `rs[0]` lies laid out, if the requests after it go on along
    // that layout for at least `JOIN_MIN` requests in all.
    let joins = |at: &FxHashMap<u64, Vec<u64>>, rs: &[Range], units: &mut u64| {
        let starts = at.get(&rs[0].0)?;
        starts.iter().copied().find(|&s0| {
            let mut c: Option<u64> = None;
            for &r in rs.iter().take(JOIN_MIN) {
                *units += r.1 - r.0;
                let ok = |s: u64| match c {
                    None => s == s0,
                    Some(c) => s >= c && s - c <= FOLLOW_AHEAD_BLOCKS,
                };
                match in_row(at, r, &ok) {
                    Some(s) => c = Some(s + (r.1 - r.0)),
                    None => return false,
                }
            }
            rs.len() >= JOIN_MIN
        })
    };
    for g in a.streams.values() {
        let mut cursor: Option<u64> = None;
        let mut order: Vec<Range> =
            if by_time { time_order(g, weight_min, units) } else { stream_order(g, weight_min, units) };
        order.retain(|r| {
            let keep = place_written || !g.written.contains(r) || g.read_written.contains(r);
            // A range left out is visited all the same.
            *units += if keep { 0 } else { r.1 - r.0 };
            keep
        });
        // A time order comes back to a request after a range left out
        // (read, written home, read again): it is read on where it lies.
        order.dedup();
        // With `relay`: the stream's walk through the sequence it follows,
        // the blocks it passed over included, its requests found nowhere
        // near inserted where it read them (`union`); `breaks`: how many
        // of its requests lie elsewhere (a seek away and back for every
        // later run that follows the sequence).
        let mut union: Vec<Range> = Vec::new();
        let mut breaks = 0u32;
        if relay {
            let mut c: Option<u64> = None;
            for &r in &order {
                *units += r.1 - r.0;
                let near = |s: u64| c.is_some_and(|c| s >= c && s - c <= FOLLOW_AHEAD_BLOCKS);
                match in_row(&at, r, &near)
                    .or_else(|| c.is_none().then(|| in_row(&at, r, &|_| true)).flatten())
                {
                    Some(s) => {
                        for v in c.unwrap_or(s)..s {
                            let h = layout[v as usize];
                            match union.last_mut() {
                                Some(l) if l.1 == h => l.1 += 1,
                                _ => union.push((h, h + 1)),
                            }
                        }
                        union.push(r);
                        c = Some(s + (r.1 - r.0));
                    }
                    None => {
                        breaks += u32::from(c.is_some());
                        union.push(r);
                    }
                }
            }
            if union
                .iter()
                .any(|r| (r.0..r.1).any(|x| at.get(&x).is_some_and(|v| v.len() >= copies_max as usize)))
            {
                breaks = 0;
            }
        }
        if breaks > 0 {
            for r in order.iter().filter(|r| pad_blocks > 0 && !g.written.contains(r)) {
                neighbours
                    .extend((r.0.saturating_sub(pad_blocks)..r.0).chain(r.1..r.1.saturating_add(pad_blocks)));
            }
            // A block the union takes again once at `copies_max` copies (a
            // path the stream came back to) is read where it lies.
            let full = |at: &FxHashMap<u64, Vec<u64>>, x: u64| {
                at.get(&x).is_some_and(|v| v.len() >= copies_max as usize)
            };
            for r in union {
                *units += r.1 - r.0;
                let mut x = r.0;
                while x < r.1 {
                    if pos >= capacity_blocks {
                        return out;
                    }
                    if full(&at, x) {
                        x += 1;
                        continue;
                    }
                    let mut y = x + 1;
                    while y < r.1 && y - x < capacity_blocks - pos && !full(&at, y) {
                        y += 1;
                    }
                    append(&mut out, &mut at, &mut layout, &mut pos, (x, y));
                    x = y;
                }
            }
            continue;
        }
        for (i, &r) in order.iter().enumerate() {
            *units += r.1 - r.0;
            if pos >= capacity_blocks {
                return out;
            }
            // A read's neighbours wait for the end (below), whether its
            // blocks are laid out here or found laid out already.
            if pad_blocks > 0 && !g.written.contains(&r) {
                neighbours
                    .extend((r.0.saturating_sub(pad_blocks)..r.0).chain(r.1..r.1.saturating_add(pad_blocks)));
                *units += 2 * pad_blocks;
            }
            let near = |s: u64| cursor.is_some_and(|c| s >= c && s - c <= FOLLOW_AHEAD_BLOCKS);
            let found = in_row(&at, r, &near)
                .or_else(|| cursor.is_none().then(|| in_row(&at, r, &|_| true)).flatten())
                .or_else(|| by_time.then(|| joins(&at, &order[i..], units)).flatten());
            if let Some(s) = found {
                cursor = Some(s + (r.1 - r.0));
                continue;
            }
            if (r.0..r.1).any(|x| at.get(&x).is_some_and(|v| v.len() >= copies_max as usize)) {
                cursor = in_row(&at, r, &|_| true).map(|s| s + (r.1 - r.0));
                continue;
            }
            let take = (r.1 - r.0).min(capacity_blocks - pos);
            append(&mut out, &mut at, &mut layout, &mut pos, (r.0, r.0 + take));
            cursor = Some(pos);
        }
    }
    // The neighbours no copy holds, after every stream's sequence, in home
    // order: a stream reading on pays nothing for them, a read of one seeks
    // within the region instead of out to home and back.
    for x in neighbours {
        *units += 1;
        if pos == capacity_blocks {
            break;
        }
        if !at.contains_key(&x) {
            append(&mut out, &mut at, &mut layout, &mut pos, (x, x + 1));
        }
    }
    out
}

/// Lays out `r`'s blocks at `pos` on (the plan `out`, where each block is
/// `at`).
fn append(
    out: &mut Vec<Range>,
    at: &mut FxHashMap<u64, Vec<u64>>,
    layout: &mut Vec<u64>,
    pos: &mut u64,
    r: Range,
) {
    assert!(r.0 < r.1);
    for x in r.0..r.1 {
        at.entry(x).or_default().push(*pos + (x - r.0));
        layout.push(x);
    }
    match out.last_mut() {
        Some(l) if l.1 == r.0 => l.1 = r.1,
        _ => out.push(r),
    }
    *pos += r.1 - r.0;
}

/// A stream's requests in the order its graph says: from a request no
/// edge leads to (else the heaviest), along the heaviest edge to a request
/// not taken yet; when none is left, on from the next such start. Only
/// requests and edges of at least `weight_min`.
fn stream_order(g: &StreamGraph, weight_min: u64, units: &mut u64) -> Vec<Range> {
    let mut out_adj: BTreeMap<Range, Vec<(Range, u64)>> = BTreeMap::new();
    let mut has_in: FxHashSet<Range> = FxHashSet::default();
    for (&(u, v), &w) in &g.edges {
        *units += 1;
        if w >= weight_min && u != v {
            out_adj.entry(u).or_default().push((v, w));
            has_in.insert(v);
        }
    }
    let mut starts: Vec<(bool, u64, Range)> = g
        .vertices
        .iter()
        .filter(|(_, &w)| w >= weight_min)
        .map(|(&r, &w)| (has_in.contains(&r), w, r))
        .collect();
    // No incoming edge first, then the heaviest; ties by range.
    starts.sort_by_key(|&(i, w, r)| (i, std::cmp::Reverse(w), r));
    let mut taken: FxHashSet<Range> = FxHashSet::default();
    let mut order = Vec::new();
    for (_, _, s) in starts {
        let mut cur = s;
        while taken.insert(cur) {
            order.push(cur);
            let next = out_adj.get(&cur).and_then(|adj| {
                *units += adj.len() as u64;
                adj.iter()
                    .filter(|(v, _)| {
                        !taken.contains(v) && g.vertices.get(v).is_some_and(|&w| w >= weight_min)
                    })
                    .max_by_key(|&&(v, w)| (w, std::cmp::Reverse(v)))
                    .map(|&(v, _)| v)
            });
            match next {
                Some(v) => cur = v,
                None => break,
            }
        }
    }
    order
}

/// A stream's requests in the order it made its transitions: each edge
/// at each of the first [`SIGHTINGS_MAX`] times the stream took it, in
/// time order, a request repeated wherever the stream came to it from
/// another than the one before it in the order. A run of a program comes
/// out as the run's reads in their order; a path it takes again later
/// (a second run, or a library's path another program on the connection
/// takes) comes out again there, and [`plan_streams`] decides whether it
/// is laid out again there (a short path) or read where it lies (a long
/// one: [`JOIN_MIN`]). Requests no edge joins come in when first seen.
/// Only vertices and edges of at least `weight_min` count.
fn time_order(g: &StreamGraph, weight_min: u64, units: &mut u64) -> Vec<Range> {
    let heavy = |r: &Range| g.vertices.get(r).is_some_and(|&w| w >= weight_min);
    let mut events: Vec<(u64, Range, Option<Range>)> = Vec::new();
    let mut joined: FxHashSet<Range> = FxHashSet::default();
    for (&(u, v), &w) in &g.edges {
        *units += 1;
        if w >= weight_min && u != v && heavy(&u) && heavy(&v) {
            let times = g.edge_seen.get(&(u, v)).expect("every edge was taken");
            events.extend(times.iter().map(|&seen| (seen, u, Some(v))));
            *units += times.len() as u64;
            joined.extend([u, v]);
        }
    }
    for (r, &seen) in &g.first_seen {
        *units += 1;
        if heavy(r) && !joined.contains(r) {
            events.push((seen, *r, None));
        }
    }
    events.sort_unstable();
    let mut order: Vec<Range> = Vec::with_capacity(events.len() + 1);
    for (_, u, v) in events {
        *units += 1;
        if order.last() != Some(&u) {
            order.push(u);
        }
        order.extend(v);
    }
    order
}

/// Steps a copy path may walk over atoms other sequences hold.
pub const COPY_PATH_MAX: usize = 8;

/// Whether atom `c` may follow `cur`, reached from `prev` (`forward`; else
/// the walk goes backwards, `c` before `cur` before `prev`): the stream's
/// skip edge `prev -> c` says so, or `c` continues `cur`'s blocks, or `cur`
/// continues `prev`'s (inside one request: no skip edge to ask).
fn follows(
    atoms: &[Range],
    skips: &FxHashSet<(u32, u32)>,
    forward: bool,
    prev: u32,
    cur: u32,
    c: u32,
) -> bool {
    let contiguous = |y: u32, x: u32| {
        let (a, b) = (atoms[y as usize], atoms[x as usize]);
        if forward {
            a.1 == b.0
        } else {
            b.1 == a.0
        }
    };
    let (p, q) = if forward { (prev, c) } else { (c, prev) };
    contiguous(cur, c) || contiguous(prev, cur) || skips.contains(&(p, q))
}

/// A walk from a sequence's end over atoms placed elsewhere (see [`plan`]).
struct CopyWalk<'a> {
    atoms: &'a [Range],
    /// Out-edges (forward) or in-edges (backward).
    adj: &'a [Vec<(u32, u64)>],
    skips: &'a FxHashSet<(u32, u32)>,
    forward: bool,
    placed: &'a [bool],
    copies: &'a [u32],
    last_seq: &'a [u32],
    copies_max: u32,
    weight_min: u64,
    seq_id: u32,
}

impl CopyWalk<'_> {
    fn consistent(&self, prev: u32, cur: u32, c: u32) -> bool {
        follows(self.atoms, self.skips, self.forward, prev, cur, c)
    }

    /// Whether another copy of `v` may go into this sequence.
    fn copyable(&self, v: u32, path: &[u32]) -> bool {
        self.placed[v as usize]
            && self.copies[v as usize] < self.copies_max
            && self.last_seq[v as usize] != self.seq_id
            && !path.contains(&v)
    }

    /// From the end atom `a` (`before`: its neighbour inside the
    /// sequence): `(weight of the first edge, atoms to place in order of
    /// placement: the copies, then the unplaced atom)`.
    fn from(&self, a: u32, before: Option<u32>, units: &mut u64) -> Option<(u64, Vec<u32>)> {
        *units += self.adj[a as usize].len() as u64;
        let (m1, w) = self.adj[a as usize]
            .iter()
            .filter(|&&(v, w)| w >= self.weight_min && self.copyable(v, &[]))
            .filter(|&&(v, _)| before.is_none_or(|b| self.consistent(b, a, v)))
            .max_by_key(|&&(v, w)| (w, std::cmp::Reverse(v)))
            .copied()?;
        let mut path = vec![m1];
        let (mut prev, mut cur) = (a, m1);
        while path.len() <= COPY_PATH_MAX {
            *units += self.adj[cur as usize].len() as u64;
            // The heaviest consistent step: an unplaced atom ends the
            // walk, a copyable one goes on (an unplaced one wins a tie).
            let (c, _) = self.adj[cur as usize]
                .iter()
                .filter(|&&(c, w)| w >= self.weight_min && self.consistent(prev, cur, c))
                .filter(|&&(c, _)| !self.placed[c as usize] || self.copyable(c, &path))
                .max_by_key(|&&(c, w)| (w, !self.placed[c as usize], std::cmp::Reverse(c)))
                .copied()?;
            path.push(c);
            if !self.placed[c as usize] {
                return Some((w, path));
            }
            (prev, cur) = (cur, c);
        }
        None
    }
}

fn len((s, e): Range) -> u64 {
    e - s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream plan of `capacity_blocks` slots, `copies_max` copies.
    fn sp(
        capacity_blocks: u64,
        copies_max: u32,
        pad_blocks: u64,
        place_written: bool,
        relay: bool,
    ) -> StreamPlan {
        StreamPlan {
            capacity_blocks,
            weight_min: WEIGHT_UNIT,
            copies_max,
            pad_blocks,
            place_written,
            relay,
            time_order: false,
        }
    }

    fn analyzer() -> Analyzer {
        Analyzer::new(Limits { think_ns: 1_000_000, vertices_max: 1000, edges_max: 1000, sightings: true })
    }

    fn e(t_ms: u64, block: u64, blocks: u32, stream: u32) -> ProfileEntry {
        ProfileEntry { time_ns: t_ms * 1_000_000, block, blocks, stream, read: true }
    }

    /// Each request's first block (a multiple of 1000), in region order.
    fn firsts(p: &[Range]) -> Vec<u64> {
        p.iter().flat_map(|&(s, e)| s..e).filter(|b| b % 1000 == 0).collect()
    }

    /// An analyzer (sightings kept) that saw stream 1 read 8 blocks at each
    /// of `blocks`, 1 ms apart.
    fn reads_of<'a>(blocks: impl IntoIterator<Item = &'a u64>) -> Analyzer {
        let mut a = analyzer();
        for (i, &b) in blocks.into_iter().enumerate() {
            a.add(e(i as u64, b, 8, 1));
        }
        a
    }

    fn plan_of(a: &Analyzer, capacity: u64, weight_min: u64) -> Vec<Range> {
        let mut units = 0;
        let m = master_graph(a, &mut units);
        plan(&m, capacity, weight_min, 1, false, &mut units)
    }

    #[test]
    fn edges_count_transitions_and_long_think_times_attenuate() {
        let mut a = analyzer();
        for (t, b) in [(0, 10), (1, 50), (2, 10), (3, 50), (1003, 90)] {
            a.add(e(t, b, 1, 1));
        }
        let g = &a.streams[&1];
        assert_eq!(g.edges[&((10, 11), (50, 51))], 2 * WEIGHT_UNIT);
        assert_eq!(g.edges[&((50, 51), (10, 11))], WEIGHT_UNIT);
        // 1000 ms after a think time of 1 ms: a thousandth of a unit.
        assert_eq!(g.edges[&((50, 51), (90, 91))], 1);
        assert_eq!((a.vertex_count(), a.edge_count()), (3, 3));
    }

    #[test]
    fn streams_are_kept_apart_so_interleaving_makes_no_edge() {
        let mut a = analyzer();
        // Two streams interleaved: 10 20 30 on one, 500 600 700 on the other.
        for (i, (b1, b2)) in [(10, 500), (20, 600), (30, 700)].into_iter().enumerate() {
            a.add(e(i as u64, b1, 1, 1));
            a.add(e(i as u64, b2, 1, 2));
        }
        let m = master_graph(&a, &mut 0);
        let pairs: Vec<(u64, u64)> =
            m.edges.iter().map(|((x, y), _)| (m.atoms[*x as usize].0, m.atoms[*y as usize].0)).collect();
        assert_eq!(pairs, vec![(10, 20), (20, 30), (500, 600), (600, 700)]);
    }

    #[test]
    fn base_keyed_graphs_link_the_runs_of_one_connection_and_run_keyed_do_not() {
        use crate::opt::config::GraphStream;
        use layoutd_core::streams::Detector;
        // One connection (base stream 7) reads two files at once, block by
        // block: the detector gives each file's reads a run of its own.
        let (file_a, file_b) = (0u64, 1u64 << 18);
        let mut d = Detector::new(true);
        let reads: Vec<_> = (0..6u64)
            .flat_map(|i| [file_a + i, file_b + i])
            .map(|b| (b, d.classify(7, b * 4096, 4096)))
            .collect();
        let runs: BTreeSet<_> = reads[2..].iter().map(|&(_, s)| s).collect();
        assert_eq!(runs.len(), 2, "two runs told apart: {runs:?}");
        let across = |key: GraphStream| {
            let mut a = analyzer();
            for (i, &(b, s)) in reads.iter().enumerate() {
                a.add(e(i as u64, b, 1, key.key(s)));
            }
            let m = master_graph(&a, &mut 0);
            let pairs: Vec<(u64, u64)> =
                m.edges.iter().map(|((x, y), _)| (m.atoms[*x as usize].0, m.atoms[*y as usize].0)).collect();
            (a.stream_count(), pairs.iter().filter(|(x, y)| (*x < file_b) != (*y < file_b)).count())
        };
        let (graphs, edges) = across(GraphStream::Base);
        assert_eq!(graphs, 1, "one graph for the connection");
        assert_eq!(edges, 11, "every transition from one file to the other is an edge");
        let (graphs, edges) = across(GraphStream::Run);
        assert!(graphs >= 2, "a graph per run: {graphs}");
        // The files' first reads continued no run yet: both are run 0's,
        // the one edge across; none between the runs.
        assert_eq!(edges, 1, "no edge across the runs");
    }

    #[test]
    fn merging_splits_overlapping_ranges_into_chained_atoms() {
        let mut a = analyzer();
        // Stream 1 reads [0,8) then [100,104); stream 2 reads [4,12) then [0,2).
        a.add(e(0, 0, 8, 1));
        a.add(e(0, 100, 4, 1));
        a.add(e(0, 4, 8, 2));
        a.add(e(0, 0, 2, 2));
        let m = master_graph(&a, &mut 0);
        assert_eq!(m.atoms, vec![(0, 2), (2, 4), (4, 8), (8, 12), (100, 104)]);
        let w = |x: u64, y: u64| {
            let (i, j) = (
                m.atoms.iter().position(|r| r.0 == x).unwrap() as u32,
                m.atoms.iter().position(|r| r.0 == y).unwrap() as u32,
            );
            m.edges.iter().find(|(k, _)| *k == (i, j)).map(|(_, w)| *w)
        };
        // [0,8) chains 0->2->4 (its own count), [4,12) chains 4->8.
        assert_eq!(w(0, 2), Some(WEIGHT_UNIT));
        assert_eq!(w(2, 4), Some(WEIGHT_UNIT));
        assert_eq!(w(4, 8), Some(WEIGHT_UNIT));
        // Stream edges: last atom of [0,8) -> [100,104); last atom of [4,12) -> [0,2).
        assert_eq!(w(4, 100), Some(WEIGHT_UNIT));
        assert_eq!(w(8, 0), Some(WEIGHT_UNIT));
        assert_eq!(m.edges.len(), 5);
    }

    #[test]
    fn greedy_places_a_repeated_random_sequence_in_access_order() {
        let mut a = analyzer();
        let seq = [700, 30, 420, 5, 990];
        for round in 0..3 {
            for (i, &b) in seq.iter().enumerate() {
                a.add(e(round * 100 + i as u64, b, 2, 1));
            }
        }
        // Noise on another stream, touched once: below the threshold.
        a.add(e(0, 300, 1, 9));
        a.add(e(1, 301, 1, 9));
        let p = plan_of(&a, 100, 2 * WEIGHT_UNIT);
        assert_eq!(p, vec![(700, 702), (30, 32), (420, 422), (5, 7), (990, 992)]);
        // The region's capacity stops the growth (from the most connected
        // atom, 5: out to 990, then in from 420) and cuts the last range.
        assert_eq!(plan_of(&a, 5, 2 * WEIGHT_UNIT), vec![(420, 422), (5, 7), (990, 991)]);
    }

    #[test]
    fn greedy_places_an_incoming_neighbour_before_and_the_heaviest_first() {
        let mut a = analyzer();
        // A hot pair 50 -> 60 (x4), then 40 -> 50 (x2): 40 goes before 50.
        for r in 0..4 {
            a.add(e(r * 10, 50, 1, 1));
            a.add(e(r * 10 + 1, 60, 1, 1));
            a.add(e(r * 10 + 5, 1000 + r, 1, 2));
        }
        for r in 0..2 {
            a.add(e(100 + r * 10, 40, 1, 3));
            a.add(e(101 + r * 10, 50, 1, 3));
        }
        let p = plan_of(&a, 100, 2 * WEIGHT_UNIT);
        assert_eq!(p, vec![(40, 41), (50, 51), (60, 61)]);
    }

    #[test]
    fn a_stream_goes_on_past_a_block_another_sequence_took_by_its_skip_edge() {
        let mut a = analyzer();
        // Program A reads 10 L 20 30 and program B reads 100 L 110, both
        // three times, where L = 500 is a shared "library" block; B twice
        // more, so B's sequence (seeded at the most connected atom, L)
        // takes L. A's edges 10 -> L and L -> 20 then lead nowhere new;
        // its skip edge 10 -> 20 keeps its blocks in its order, next to
        // each other.
        for round in 0..3 {
            for (i, b) in [10, 500, 20, 30].into_iter().enumerate() {
                a.add(e(round * 100 + i as u64, b, 1, 1));
            }
        }
        for round in 0..5 {
            for (i, b) in [100, 500, 110].into_iter().enumerate() {
                a.add(e(1000 + round * 100 + i as u64, b, 1, 2 + round as u32));
            }
        }
        // Skip edges span two think times (2 ms here: half a unit each).
        let g = &a.streams[&1];
        assert_eq!(g.skips[&((10, 11), (20, 21))], 3 * WEIGHT_UNIT / 2);
        assert_eq!(g.skips[&((500, 501), (30, 31))], 3 * WEIGHT_UNIT / 2);
        assert!(g.skips[&((30, 31), (500, 501))] < WEIGHT_UNIT / 10, "across the gap between rounds");
        let p = plan_of(&a, 100, WEIGHT_UNIT);
        assert_eq!(p, vec![(100, 101), (500, 501), (110, 111), (10, 11), (20, 21), (30, 31)]);
        // Without skip edges A's blocks would be cut apart: 10 joins L's
        // sequence from the front only if it is heavier than B's 100.
        let mut m = master_graph(&a, &mut 0);
        m.skips.clear();
        let p = plan(&m, 100, WEIGHT_UNIT, 1, false, &mut 0);
        assert_eq!(p[..3], [(100, 101), (500, 501), (110, 111)]);
        assert!(p.windows(2).all(|w| w != [(10, 11), (20, 21)]), "{p:?}");
    }

    #[test]
    fn copies_put_a_shared_block_in_each_programs_sequence() {
        // Program A reads 10 L 20 30, program B 100 L 110, each run its own
        // stream, three runs each: with two copies allowed, L (500) sits in
        // both sequences, and each program's blocks are in its order.
        let mut a = analyzer();
        for round in 0..3u64 {
            for (i, b) in [10, 500, 20, 30].into_iter().enumerate() {
                a.add(e(round * 100 + i as u64, b, 1, 10 + 2 * round as u32));
            }
            for (i, b) in [100, 500, 110].into_iter().enumerate() {
                a.add(e(round * 100 + 50 + i as u64, b, 1, 11 + 2 * round as u32));
            }
        }
        let m = master_graph(&a, &mut 0);
        let p = plan(&m, 100, WEIGHT_UNIT, 2, true, &mut 0);
        let firsts: Vec<u64> = p.iter().map(|r| r.0).collect();
        let has = |seq: &[u64]| firsts.windows(seq.len()).any(|w| w == seq);
        assert!(has(&[10, 500, 20, 30]) && has(&[100, 500, 110]), "{firsts:?}");
        assert_eq!(firsts.iter().filter(|&&b| b == 500).count(), 2);
        // One copy: L once, as before.
        let p = plan(&m, 100, WEIGHT_UNIT, 1, true, &mut 0);
        assert_eq!(p.iter().filter(|r| r.0 == 500).count(), 1);
    }

    #[test]
    fn a_run_that_leaves_its_sequence_gets_the_sequence_laid_out_anew_with_its_requests_in_place() {
        // Requests of 40 blocks (so a sequence's next request is more than
        // FOLLOW_AHEAD_BLOCKS past an earlier one's), each its own stream:
        // program P reads P L (L a library); runs of another program read
        // A B C D (run 1), A B X C L D (run 2: X a part run 1 skipped, L
        // what run 1 found cached), A B X C Y D (run 3: Y new, L cached).
        let sp = |relay| sp(1000, 4, 0, true, relay);
        let (p_, l_, a_, b_, c_, d_, x_, y_) = (5000, 7000, 1000, 2000, 3000, 4000, 6000, 8000);
        let runs: [&[u64]; 4] =
            [&[p_, l_], &[a_, b_, c_, d_], &[a_, b_, x_, c_, l_, d_], &[a_, b_, x_, c_, y_, d_]];
        let analyzer_of = |runs: &[&[u64]]| {
            let mut a = analyzer();
            for (k, run) in runs.iter().enumerate() {
                for (i, &b) in run.iter().enumerate() {
                    a.add(e(100 * k as u64 + i as u64, b, 40, 1 + k as u32));
                }
            }
            a
        };
        let a = analyzer_of(&runs);
        // Without: a run that leaves the sequence it reads on along gets
        // its requests from there on laid out after everything (run 2: X C
        // L D), apart from the part it found (A B); run 3 the same (X C Y
        // D), so a later run seeks from one piece to the next.
        let before = plan_streams(&a, &sp(false), &mut 0);
        assert_eq!(firsts(&before), vec![p_, l_, a_, b_, c_, d_, x_, c_, l_, d_, x_, c_, y_, d_]);
        // With: run 2's sequence is run 1's laid out anew with X and L
        // where run 2 read them; run 3 follows that newest layout and gets
        // it laid out anew with Y in place, keeping L, which it passed
        // over (found cached): each run's sequence whole, and the last one
        // holds what the runs before it read.
        let after = plan_streams(&a, &sp(true), &mut 0);
        assert_eq!(
            firsts(&after),
            vec![p_, l_, a_, b_, c_, d_, a_, b_, x_, c_, l_, d_, a_, b_, x_, c_, y_, l_, d_]
        );
        // A run that reads along its sequence without leaving it takes no
        // room.
        let same = analyzer_of(&[&[a_, b_, c_, d_], &[a_, b_, c_, d_]]);
        assert_eq!(firsts(&plan_streams(&same, &sp(true), &mut 0)), vec![a_, b_, c_, d_]);
        // A request the run skipped (B of A X C D) stays in the new layout,
        // after the run's insertion.
        let skip = analyzer_of(&[&[a_, b_, c_, d_], &[a_, x_, c_, d_]]);
        assert_eq!(firsts(&plan_streams(&skip, &sp(true), &mut 0)), vec![a_, b_, c_, d_, a_, x_, b_, c_, d_]);
        // At the copy cap the run is planned as without: X alone.
        let capped = StreamPlan { copies_max: 1, ..sp(true) };
        assert_eq!(firsts(&plan_streams(&skip, &capped, &mut 0)), vec![a_, b_, c_, d_, x_]);
    }

    #[test]
    fn a_time_ordered_stream_plan_lays_out_each_program_as_it_read_with_its_own_copy_of_a_shared_library() {
        // One connection (a live start-up: every program on one stream)
        // runs three programs, each reading the shared library L between
        // two files of its own, then the first program again.
        let (l_, p1, p2, q1, q2, g1, g2) = (1000, 2000, 3000, 4000, 5000, 6000, 7000);
        let trace = [l_, p1, p2, q1, l_, q2, g1, l_, g2, l_, p1, p2];
        let mut a = reads_of(&trace);
        let timed =
            |copies_max| StreamPlan { copies_max, time_order: true, ..sp(1 << 20, 1, 0, true, false) };
        // Each program's reads in their order, L again in each of them; the
        // last run repeats the first, a path too short to be worth a seek
        // there and back (JOIN_MIN), so it is laid out again too.
        assert_eq!(
            firsts(&plan_streams(&a, &timed(4), &mut 0)),
            vec![l_, p1, p2, q1, l_, q2, g1, l_, g2, l_, p1, p2]
        );
        // At the copy cap a program's sequence goes on without its L (and
        // the last run reads on along the first's, L's only copy just
        // before it).
        assert_eq!(firsts(&plan_streams(&a, &timed(1), &mut 0)), vec![l_, p1, p2, q1, q2, g1, g2]);
        // The graph's order follows the heaviest edges out of L and leaves
        // perl and git apart from their library.
        let graph = StreamPlan { time_order: false, ..timed(4) };
        assert_ne!(firsts(&plan_streams(&a, &graph, &mut 0)), firsts(&plan_streams(&a, &timed(4), &mut 0)));
        // Halving keeps the sightings of what survives.
        a.halve();
        assert_eq!(
            firsts(&plan_streams(&a, &StreamPlan { weight_min: 1, ..timed(4) }, &mut 0)),
            vec![l_, p1, p2, q1, l_, q2, g1, l_, g2, l_, p1, p2]
        );
    }

    #[test]
    fn a_time_ordered_stream_plan_reads_a_long_rerun_where_it_lies_and_copies_a_short_shared_path() {
        // A program of JOIN_MIN requests, then another that takes three of
        // them (a shared path) between two of its own, then the first
        // program again, whole.
        let first: Vec<u64> = (1..=JOIN_MIN as u64).map(|i| 1000 * i).collect();
        let (o1, o2) = (900_000, 901_000);
        let mut trace = first.clone();
        trace.extend([o1, first[4], first[5], first[6], o2]);
        trace.extend(&first);
        let a = reads_of(&trace);
        let plan = StreamPlan { time_order: true, ..sp(1 << 20, 8, 0, true, false) };
        // The shared path is copied between o1 and o2; the rerun, as long
        // as JOIN_MIN, takes no room: it is read where the first run lies.
        let mut want = first.clone();
        want.extend([o1, first[4], first[5], first[6], o2]);
        assert_eq!(firsts(&plan_streams(&a, &plan, &mut 0)), want);
        // One request shorter and the rerun is laid out again.
        let short = &first[..JOIN_MIN - 1];
        let a = reads_of(short.iter().chain(&[o1]).chain(short));
        let mut want: Vec<u64> = short.to_vec();
        want.push(o1);
        want.extend(short);
        assert_eq!(firsts(&plan_streams(&a, &plan, &mut 0)), want);
    }

    #[test]
    fn a_time_ordered_rerun_joins_a_layout_only_if_all_its_first_join_min_requests_go_on_along_it() {
        let plan = StreamPlan { time_order: true, ..sp(1 << 20, 8, 0, true, false) };
        let run = |trace: &[u64]| firsts(&plan_streams(&reads_of(trace), &plan, &mut 0));
        // A first run reading its JOIN_MIN files from the last to the
        // first, then another file, then the same files the other way
        // round: every one of them is laid out, but not in the rerun's
        // order, so the rerun is laid out again in its own.
        let down: Vec<u64> = (1..=JOIN_MIN as u64).rev().map(|i| 1000 * i).collect();
        let up: Vec<u64> = down.iter().rev().copied().collect();
        let o1 = 900_000;
        let trace: Vec<u64> = down.iter().chain(&[o1]).chain(&up).copied().collect();
        assert_eq!(run(&trace), trace);
        // A rerun whose first JOIN_MIN - 1 requests go on along the first
        // run and whose next one does not is laid out again too.
        let first: Vec<u64> = up.clone();
        let o2 = 901_000;
        let trace: Vec<u64> =
            first.iter().chain(&[o1]).chain(&first[..JOIN_MIN - 1]).chain(&[o2]).copied().collect();
        assert_eq!(run(&trace), trace);
    }

    #[test]
    fn a_time_ordered_plan_without_written_ranges_copies_no_request_right_after_itself() {
        // A program reads its config, writes its log, reads the config
        // again, then goes on: with the log left home (`plan_written =
        // false`) the second read follows the first, and no second copy of
        // the config is laid out right after the first.
        let (c_, w_, x_, y_) = (1000, 5000, 2000, 3000);
        let mut a = analyzer();
        for (i, (b, read)) in
            [(c_, true), (w_, false), (c_, true), (x_, true), (y_, true)].into_iter().enumerate()
        {
            a.add(ProfileEntry { read, ..e(i as u64, b, 8, 1) });
        }
        for relay in [false, true] {
            let plan = StreamPlan { time_order: true, ..sp(1 << 20, 4, 0, false, relay) };
            assert_eq!(firsts(&plan_streams(&a, &plan, &mut 0)), vec![c_, x_, y_]);
        }
        // Laid out too (`plan_written = true`), the log sits between them.
        let plan = StreamPlan { time_order: true, ..sp(1 << 20, 4, 0, true, false) };
        assert_eq!(firsts(&plan_streams(&a, &plan, &mut 0)), vec![c_, w_, c_, x_, y_]);
    }

    #[test]
    fn a_time_ordered_relay_lays_out_no_block_more_than_copies_max_times() {
        // Stream 1 lays out A B C D; stream 2 reads A B, a file of its
        // own, A B again, another: its time order takes A B twice, and
        // relaid whole with them it would hold a third copy of each.
        let (a_, b_, c_, d_, x_, y_) = (1000, 2000, 3000, 4000, 9000, 8000);
        let mut a = analyzer();
        for (i, b) in [a_, b_, c_, d_].into_iter().enumerate() {
            a.add(e(i as u64, b, 8, 1));
        }
        for (i, b) in [a_, b_, x_, a_, b_, y_].into_iter().enumerate() {
            a.add(e(i as u64, b, 8, 2));
        }
        let plan = |relay| StreamPlan { time_order: true, ..sp(1 << 20, 2, 0, true, relay) };
        let relaid = firsts(&plan_streams(&a, &plan(true), &mut 0));
        for b in [a_, b_] {
            assert!(relaid.iter().filter(|&&x| x == b).count() <= 2, "{relaid:?}");
        }
        // Relaid with A B once, after its file it reads on along that
        // copy (no third one).
        assert_eq!(relaid, vec![a_, b_, c_, d_, a_, b_, x_, y_]);
    }

    #[test]
    fn time_order_bookkeeping_follows_the_graph_through_halving_and_the_caps() {
        // A tight cap halves often; every vertex and edge left keeps its
        // times and nothing else is kept.
        let mut a =
            Analyzer::new(Limits { think_ns: 1_000_000, vertices_max: 12, edges_max: 16, sightings: true });
        let mut x = 7u64;
        for i in 0..2000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Some long think times (light edges that fade at the next
            // halving while their vertices stay), two streams.
            let t = i * 2 + if x >> 60 == 0 { 50 } else { 0 };
            a.add(e(t, 10 * ((x >> 33) % 24), 2, (x >> 20) as u32 % 2));
            if i % 97 == 0 {
                a.halve();
            }
            for g in a.streams.values() {
                assert!(g.first_seen.keys().all(|r| g.vertices.contains_key(r)));
                assert_eq!(g.first_seen.len(), g.vertices.len());
                assert!(g.edge_seen.keys().all(|k| g.edges.contains_key(k)));
                assert_eq!(g.edge_seen.len(), g.edges.len());
                assert!(g.edge_seen.values().all(|t| {
                    !t.is_empty() && t.len() <= SIGHTINGS_MAX && t.windows(2).all(|w| w[0] < w[1])
                }));
            }
        }
    }

    #[test]
    fn an_analyzer_without_sightings_keeps_none_and_a_time_ordered_plan_takes_the_graphs_order() {
        let trace = [1000, 2000, 3000, 4000, 1000, 5000, 6000, 1000, 7000];
        let build = |sightings| {
            let mut a =
                Analyzer::new(Limits { think_ns: 1_000_000, vertices_max: 1000, edges_max: 1000, sightings });
            for (i, &b) in trace.iter().enumerate() {
                a.add(e(i as u64, b, 8, 1));
            }
            a
        };
        let (with, without) = (build(true), build(false));
        let g = &without.streams[&1];
        assert!(g.first_seen.is_empty() && g.edge_seen.is_empty());
        assert_eq!(with.streams[&1].edge_seen.len(), with.streams[&1].edges.len());
        let timed = StreamPlan { time_order: true, ..sp(1 << 20, 4, 0, true, false) };
        let graph = StreamPlan { time_order: false, ..timed };
        assert_eq!(plan_streams(&without, &timed, &mut 0), plan_streams(&without, &graph, &mut 0));
        assert_ne!(plan_streams(&with, &timed, &mut 0), plan_streams(&with, &graph, &mut 0));
    }

    #[test]
    fn stream_plans_lay_each_run_out_in_its_order_and_reuse_an_earlier_runs_layout() {
        let mut a = analyzer();
        // A file read backwards by growing windows (what a page cache makes
        // of reads out of file order): each request in a row, in order.
        for (i, (b, n)) in [(27, 1), (26, 2), (25, 3)].into_iter().enumerate() {
            a.add(e(i as u64, b, n, 1));
        }
        // Program B twice (streams 2, 3), sharing 26..28 with the file
        // above; the second run skips a request and reads on along the
        // first run's layout: it takes no room.
        for (i, b) in [100, 26, 200, 300].into_iter().enumerate() {
            a.add(e(10 + i as u64, b, 1 + u32::from(b == 26), 2));
        }
        for (i, b) in [100, 26, 300].into_iter().enumerate() {
            a.add(e(20 + i as u64, b, 1 + u32::from(b == 26), 3));
        }
        let p = plan_streams(&a, &sp(100, 4, 0, true, false), &mut 0);
        assert_eq!(
            p,
            vec![(27, 28), (26, 28), (25, 28), (100, 101), (26, 28), (200, 201), (300, 301)],
            "stream 1's windows, then stream 2 with its own copy of 26..28"
        );
        // Three copies at most: stream 1 made three of 27, so stream 2 finds
        // none left for 26..28 and goes on from where it lies.
        let p = plan_streams(&a, &sp(100, 3, 0, true, false), &mut 0);
        assert_eq!(p, vec![(27, 28), (26, 28), (25, 28), (100, 101), (200, 201), (300, 301)]);
        // The region's capacity cuts the plan.
        assert_eq!(plan_streams(&a, &sp(4, 4, 0, true, false), &mut 0), vec![(27, 28), (26, 28), (25, 26)]);
    }

    #[test]
    fn padded_stream_plans_add_each_requests_unplaced_home_neighbours_after_every_sequence() {
        let mut a = analyzer();
        // Stream 1 reads two pieces of a file (10..12 and 15..16: 12..15
        // between them, a piece it skipped) and one elsewhere; stream 2
        // reads 17..18, a neighbour of stream 1's piece.
        for (i, (b, n)) in [(10, 2), (15, 1), (50, 2)].into_iter().enumerate() {
            a.add(e(i as u64, b, n, 1));
        }
        a.add(e(10, 17, 1, 2));
        let unpadded = plan_streams(&a, &sp(100, 4, 0, true, false), &mut 0);
        assert_eq!(unpadded, vec![(10, 12), (15, 16), (50, 52), (17, 18)]);
        // Two blocks each side: the sequences as before, then the
        // neighbours no request placed (17 is stream 2's), in home order,
        // so the skipped piece 12..15 is in the region.
        let p = plan_streams(&a, &sp(100, 4, 2, true, false), &mut 0);
        let want = [
            (10, 12),
            (15, 16),
            (50, 52),
            (17, 18),
            (8, 10),
            (12, 15),
            (16, 17),
            (18, 20),
            (48, 50),
            (52, 54),
        ];
        assert_eq!(p, want);
        let placed = |b: u64| p.iter().filter(|r| r.0 <= b && b < r.1).count();
        assert!((8..20).chain(48..54).all(|b| placed(b) == 1), "each block once: {p:?}");
        assert_eq!(placed(7) + placed(20) + placed(47) + placed(54), 0);
        // The neighbours come last: the capacity cuts them first.
        assert_eq!(
            plan_streams(&a, &sp(8, 4, 2, true, false), &mut 0),
            vec![(10, 12), (15, 16), (50, 52), (17, 18), (8, 10)]
        );
        // A stream's own reads are never displaced by padding.
        assert_eq!(plan_streams(&a, &sp(6, 4, 2, true, false), &mut 0), unpadded);
        // A written range is placed, its neighbours are not (where the
        // next writes go); a read of the same range by another stream pads.
        a.add(ProfileEntry { read: false, ..e(20, 80, 2, 3) });
        let p = plan_streams(&a, &sp(100, 4, 2, true, false), &mut 0);
        assert_eq!(p[..5], [(10, 12), (15, 16), (50, 52), (17, 18), (80, 82)]);
        assert_eq!(p[5..], want[4..], "no neighbour of the written 80..82");
        a.add(e(30, 80, 2, 4));
        let p = plan_streams(&a, &sp(100, 4, 2, true, false), &mut 0);
        assert_eq!(p[p.len() - 2..], [(78, 80), (82, 84)]);
    }

    #[test]
    fn a_stream_plan_without_written_ranges_leaves_a_streams_writes_home() {
        let mut a = analyzer();
        // Stream 1 reads 10..12, writes 40..41, reads 15..16, writes 60..62
        // and 15..16 (which it read); stream 2 reads 40..41 (the block
        // stream 1 wrote).
        let reqs = [(10, 2, true), (40, 1, false), (15, 1, true), (60, 2, false), (15, 1, false)];
        for (i, (b, n, read)) in reqs.into_iter().enumerate() {
            a.add(ProfileEntry { read, ..e(i as u64, b, n, 1) });
        }
        a.add(e(10, 40, 1, 2));
        let all = plan_streams(&a, &sp(100, 4, 0, true, false), &mut 0);
        assert_eq!(all, vec![(10, 12), (40, 41), (15, 16), (60, 62)], "writes are vertices: placed in order");
        // Without written ranges: stream 1's reads alone, in order (15..16,
        // read and written, stays); stream 2 did not write 40..41, so its
        // read of it is laid out.
        let reads = plan_streams(&a, &sp(100, 4, 0, false, false), &mut 0);
        assert_eq!(reads, vec![(10, 12), (15, 16), (40, 41)]);
    }

    #[test]
    fn a_vertex_counts_every_access_of_its_range() {
        let mut a = analyzer();
        for t in 0..3 {
            a.add(e(t, 10, 2, 1));
        }
        a.add(e(3, 20, 1, 1));
        assert_eq!(
            a.streams[&1].vertices[&(10, 12)],
            3 * WEIGHT_UNIT,
            "was reset to one unit by each access"
        );
        assert_eq!(a.streams[&1].vertices[&(20, 21)], WEIGHT_UNIT);
        assert_eq!(a.vertex_count(), 2);
    }

    #[test]
    fn a_request_whose_vertex_faded_away_links_nothing() {
        // Found by the oracle with plans every few requests: the stream's
        // last request's vertex halved to zero, then an edge from it named
        // a vertex no graph had, and merging panicked.
        let mut a = analyzer();
        a.add(e(0, 10, 1, 1));
        for _ in 0..11 {
            a.halve();
        }
        assert_eq!(a.vertex_count(), 0);
        a.add(e(1, 20, 1, 1));
        a.add(e(2, 30, 1, 1));
        let m = master_graph(&a, &mut 0);
        assert_eq!(m.atoms, vec![(20, 21), (30, 31)]);
        assert_eq!(m.edges.len(), 1);
    }

    #[test]
    fn memory_stays_under_the_caps_by_halving() {
        let mut a = Analyzer::new(Limits { think_ns: 1, vertices_max: 50, edges_max: 40, sightings: true });
        for i in 0..1000u64 {
            a.add(e(i, (i * 7919) % 5000, 1, (i % 3) as u32));
            assert!(a.vertex_count() <= 50 && a.edge_count() <= 40);
        }
        assert!(a.units > 1000);
        let mut b = Profile::new(4);
        (0..6).for_each(|i| b.record(e(i, i, 1, 0)));
        assert_eq!((b.len(), b.dropped_count), (4, 2));
        assert_eq!(b.take(3).count(), 3);
    }
}
