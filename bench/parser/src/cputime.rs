//! A criterion measurement of this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
//!
//! The benchmark machine is shared: under load, wall-clock time includes the time the
//! thread waited for a core, which swamps the differences being measured. CPU time is also
//! the cost that matters for a proxy, whose CPU is taken from the database's.
#![allow(unsafe_code)]

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::Throughput;

/// Nanoseconds of CPU time this thread has used.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_THREAD_CPUTIME_ID is supported by every Linux kernel this runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Use with `Criterion::default().with_measurement(CpuTime)`.
pub struct CpuTime;

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }

    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }

    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &NanosFormatter
    }
}

struct NanosFormatter;

impl ValueFormatter for NanosFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = match typical {
            t if t < 1e3 => (1.0, "ns"),
            t if t < 1e6 => (1e3, "µs"),
            t if t < 1e9 => (1e6, "ms"),
            _ => (1e9, "s"),
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }

    fn scale_throughputs(&self, typical: f64, throughput: &Throughput, values: &mut [f64]) -> &'static str {
        let Throughput::Elements(n) = throughput else {
            return self.scale_values(typical, values);
        };
        let per_sec = *n as f64 * 1e9 / typical;
        let (div, unit) = match per_sec {
            r if r < 1e3 => (1.0, "elem/s"),
            r if r < 1e6 => (1e3, "Kelem/s"),
            _ => (1e6, "Melem/s"),
        };
        values.iter_mut().for_each(|v| *v = *n as f64 * 1e9 / *v / div);
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let start = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > start);
    }
}
