//! Thread per core (`general.thread_layout = "per_core"`): threads that each run their own
//! single-threaded runtime, so a session, and the server connections it opened, never leave
//! the thread that accepted its client.
//!
//! Why: on a work-stealing runtime a round trip wakes whichever worker is parked, hands the
//! I/O driver between workers and steals tasks back and forth; at 16 clients that was a fifth
//! of pgvia's CPU per transaction (`docs/benchmarks.md`). Here each thread accepts from its own
//! listener on the shared port (`SO_REUSEPORT`; the kernel spreads new connections over them)
//! and a tokio socket wakes only the runtime that registered it.
//!
//! Thread 0 is the one `Proxy::run` runs on (it also serves the Unix socket, metrics, the
//! gateway and the background tasks); [`Cores`] starts and stops the others. Pools keep one
//! idle list per thread, indexed by [`current`].

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tokio::sync::watch;

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The most threads any [`Cores`] in this process has had, thread 0 included.
static COUNT: AtomicUsize = AtomicUsize::new(1);

/// The index of the thread this runs on: 0 outside the threads [`Cores`] started.
pub fn current() -> usize {
    CURRENT.with(Cell::get)
}

/// How many client threads there are (or were): what per-thread tables are sized by. One
/// made before the threads started indexes modulo its size, so it still works, only with
/// threads sharing a slot.
pub fn count() -> usize {
    COUNT.load(Ordering::Relaxed)
}

/// Where the threads' accept loops are in the process's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Accepting clients.
    Serve,
    /// Shutting down: no new clients; sessions finish.
    Drain,
    /// The runtime stops; what still runs on it is dropped.
    Exit,
}

/// Threads 1..n, each running its own current-thread runtime until [`Cores::exit`] (or drop).
pub struct Cores {
    stage: watch::Sender<Stage>,
    threads: Vec<JoinHandle<()>>,
}

impl Cores {
    /// No extra threads (the work-stealing layout, or one thread).
    pub fn none() -> Cores {
        Cores { stage: watch::channel(Stage::Serve).0, threads: Vec::new() }
    }

    /// Starts one thread per entry of `work`, numbered from 1. Each runs its entry's future
    /// (made on the thread, so it need not be `Send`) and then the tasks it spawned, until
    /// [`Stage::Exit`].
    pub fn start<W, F>(work: Vec<W>, stack_size: usize) -> std::io::Result<Cores>
    where
        W: FnOnce(watch::Receiver<Stage>) -> F + Send + 'static,
        F: Future<Output = ()> + 'static,
    {
        let (stage, _) = watch::channel(Stage::Serve);
        COUNT.fetch_max(work.len() + 1, Ordering::Relaxed);
        // Every runtime is built before any thread starts, so a failure leaves nothing running.
        let runtimes = work
            .iter()
            .map(|_| tokio::runtime::Builder::new_current_thread().enable_all().build())
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut cores = Cores { stage, threads: Vec::with_capacity(work.len()) };
        for (i, (work, runtime)) in work.into_iter().zip(runtimes).enumerate() {
            let index = i + 1;
            let rx = cores.stage.subscribe();
            let thread = std::thread::Builder::new()
                .name(format!("pgvia-core-{index}"))
                .stack_size(stack_size)
                .spawn(move || run_core(index, runtime, work, rx))?;
            cores.threads.push(thread);
        }
        Ok(cores)
    }

    /// Shutdown's first step: the threads stop accepting; their sessions go on.
    pub fn drain(&self) {
        self.stage.send_replace(Stage::Drain);
    }

    /// Stops the threads' runtimes (dropping any session still on them) and waits for the
    /// threads to end.
    pub async fn exit(mut self) {
        self.stage.send_replace(Stage::Exit);
        let threads = std::mem::take(&mut self.threads);
        if threads.is_empty() {
            return;
        }
        let joined = tokio::task::spawn_blocking(move || {
            threads.into_iter().map(JoinHandle::join).collect::<Vec<_>>()
        });
        if let Ok(results) = joined.await {
            if results.iter().any(Result::is_err) {
                tracing::error!("a client thread ended with a panic");
            }
        }
    }
}

impl Drop for Cores {
    fn drop(&mut self) {
        // A proxy bound and dropped without running must not leave threads behind.
        self.stage.send_replace(Stage::Exit);
    }
}

fn run_core<W, F>(index: usize, runtime: tokio::runtime::Runtime, work: W, stage: watch::Receiver<Stage>)
where
    W: FnOnce(watch::Receiver<Stage>) -> F,
    F: Future<Output = ()>,
{
    CURRENT.with(|c| c.set(index));
    let mut exit = stage.clone();
    runtime.block_on(async move {
        let serve = async move {
            work(stage).await;
            // The accept loop is done; the sessions it spawned still run on this runtime.
            std::future::pending::<()>().await
        };
        tokio::select! {
            () = serve => {}
            _ = exit.wait_for(|s| *s == Stage::Exit) => {}
        }
    });
    // Dropped here, on its own thread and outside any runtime, as tokio requires.
    drop(runtime);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn threads_know_their_index_and_end_on_exit() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let work: Vec<_> = (0..2)
            .map(|_| {
                let tx = tx.clone();
                move |mut stage: watch::Receiver<Stage>| async move {
                    let _ = tx.send(current());
                    let _ = stage.wait_for(|s| *s != Stage::Serve).await;
                    let _ = tx.send(100 + current());
                }
            })
            .collect();
        let cores = Cores::start(work, 256 * 1024).expect("start");
        let mut seen = vec![rx.recv().await.expect("first"), rx.recv().await.expect("second")];
        seen.sort_unstable();
        assert_eq!(seen, [1, 2]);
        assert_eq!(current(), 0);
        cores.drain();
        let mut drained = vec![rx.recv().await.expect("first"), rx.recv().await.expect("second")];
        drained.sort_unstable();
        assert_eq!(drained, [101, 102]);
        cores.exit().await;
    }
}
