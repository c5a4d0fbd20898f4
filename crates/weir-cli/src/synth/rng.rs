//! Randomness for synthesis: a small per-flow generator and the distributions the model draws from.
//!
//! Every flow owns a [`FlowRng`] seeded from the run's seed and the flow's number, so
//! a flow's bytes depend only on `(seed, flow number)`, never on how flows happen to
//! interleave. SplitMix64 rather than ChaCha because 100,000 open flows each carry
//! one, and its 8 bytes of state keep memory proportional to concurrency; its output
//! is the same on every platform, which the determinism guarantee needs.

use rand::{Rng, RngCore};

/// SplitMix64 (Steele, Lea and Flood, OOPSLA 2014): one 64-bit word of state.
#[derive(Clone, Debug)]
pub struct FlowRng(u64);

impl FlowRng {
    /// A stream for `(seed, stream)`: distinct streams give unrelated sequences.
    pub fn new(seed: u64, stream: u64) -> FlowRng {
        let mut r = FlowRng(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03));
        r.next_u64();
        FlowRng(r.next_u64() ^ stream)
    }
}

impl RngCore for FlowRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        let mut chunks = dest.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let w = self.next_u64().to_le_bytes();
            rest.copy_from_slice(&w[..rest.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// The SplitMix64 finalizer: a bijection on u64 that scatters nearby inputs.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform draw in (0, 1]: never zero, so logarithms and inverse powers stay finite.
pub fn unit_open(rng: &mut impl Rng) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw (Box–Muller).
pub fn normal(rng: &mut impl Rng) -> f64 {
    let u1 = unit_open(rng);
    let u2 = unit_open(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Log-normal with the given median and shape.
pub fn lognormal(rng: &mut impl Rng, median: f64, sigma: f64) -> f64 {
    median * (sigma * normal(rng)).exp()
}

/// Pareto with scale `xm` and tail index `alpha`: P(X > x) = (xm / x)^alpha.
pub fn pareto(rng: &mut impl Rng, xm: f64, alpha: f64) -> f64 {
    xm / unit_open(rng).powf(1.0 / alpha)
}

/// An index in `0..n` with P(i) roughly proportional to 1/(i+1): popular servers, common names.
pub fn zipf_index(rng: &mut impl Rng, n: usize) -> usize {
    let x = (n as f64 + 1.0).powf(unit_open(rng) * 0.999_999);
    (x as usize).saturating_sub(1).min(n - 1)
}

/// Pick from a table by integer weight.
pub fn weighted<'a, T>(rng: &mut impl Rng, table: &'a [(u32, T)]) -> &'a T {
    let total: u32 = table.iter().map(|(w, _)| w).sum();
    let mut x = rng.gen_range(0..total);
    for (w, v) in table {
        if x < *w {
            return v;
        }
        x -= w;
    }
    &table[table.len() - 1].1
}

/// One element of a non-empty slice.
pub fn pick<T: Copy>(rng: &mut impl Rng, items: &[T]) -> T {
    items[rng.gen_range(0..items.len())]
}
