//! The flood row's measure, for any `/healthz` a node sidecar serves (livenessprobe's, the
//! registrar's `--health-port`): `rounds` floods of `n` requests at once, each on its own
//! connection as kubelet's prober and a scraper each open their own. Every answer must be 200,
//! the descriptors must be back to the idle level after each flood, and the memory after the
//! last third of the floods must not be above the first two thirds' (+10 %): a leak grows by the
//! same amount each flood, memory the allocator keeps levels off.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use futures::future::join_all;
use testbed_support::http_client::{self, HttpResponse};
use tokio::time::Instant;

use super::Findings;
use super::procstat::{self, Sample};

/// How long the descriptors of finished requests may take to be closed.
pub(super) const SETTLE: Duration = Duration::from_secs(20);

/// One `/healthz` answer and how long it took.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: String,
    pub(super) took: Duration,
}

/// A sidecar process serving `/healthz`.
pub(super) trait Flooded {
    /// One request on a connection of its own.
    async fn healthz(&self) -> anyhow::Result<Answer>;
    /// The process, for `/proc`.
    fn pid(&self) -> u32;
}

/// GET `/healthz` of `addr` on a new connection, timed.
pub(super) async fn get_healthz(addr: SocketAddr, timeout: Duration) -> anyhow::Result<Answer> {
    let started = Instant::now();
    let HttpResponse { status, body, .. } = http_client::get(addr, "/healthz", timeout).await?;
    Ok(Answer {
        status,
        body,
        took: started.elapsed(),
    })
}

/// `n` requests at once, each on its own connection.
pub(super) async fn concurrent(target: &impl Flooded, n: usize) -> Vec<anyhow::Result<Answer>> {
    join_all((0..n).map(|_| target.healthz())).await
}

/// Waits until the process holds at most `fds` descriptors; returns how long it took.
pub(super) async fn settle_to(target: &impl Flooded, fds: u64) -> anyhow::Result<Option<Duration>> {
    let started = Instant::now();
    while started.elapsed() < SETTLE {
        if Sample::read(target.pid(), Duration::ZERO)?.fds <= fds {
            return Ok(Some(started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(None)
}

/// The slowest of `answers`, in seconds.
pub(super) fn slowest(answers: &[Answer]) -> f64 {
    answers
        .iter()
        .map(|a| a.took.as_secs_f64())
        .fold(0.0, f64::max)
}

pub(super) async fn flood(
    rig: &impl Flooded,
    f: &mut Findings,
    n: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    let before = Sample::read(rig.pid(), Duration::ZERO)?;
    let mut settled_levels = Vec::new();
    let mut highest = before;
    let (mut answered, mut longest_flood, mut slowest_answer, mut longest_settle) =
        (0, 0.0_f64, 0.0_f64, 0.0_f64);
    for round in 1..=rounds {
        let peak = std::sync::Mutex::new(before);
        let sampling = async {
            loop {
                if let Ok(now) = Sample::read(rig.pid(), Duration::ZERO) {
                    let mut peak = peak
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    *peak =
                        procstat::first_window_peak(&[*peak, now], Duration::MAX).unwrap_or(now);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let started = Instant::now();
        let answers = tokio::select! {
            answers = concurrent(rig, n) => answers,
            () = sampling => unreachable!("the sampler never ends"),
        };
        longest_flood = longest_flood.max(started.elapsed().as_secs_f64());
        let peak = peak
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        highest = procstat::first_window_peak(&[highest, peak], Duration::MAX).unwrap_or(peak);
        let failed = answers.iter().filter(|a| a.is_err()).count();
        let answers: Vec<Answer> = answers.into_iter().filter_map(Result::ok).collect();
        let ok = answers.iter().filter(|a| a.status == 200).count();
        answered += ok;
        slowest_answer = slowest_answer.max(slowest(&answers));
        f.expect(ok == n, || {
            let other = answers
                .iter()
                .find(|a| a.status != 200)
                .map(|a| format!(" (one answered {} {:?})", a.status, a.body))
                .unwrap_or_default();
            format!("flood {round}: {ok} of {n} answered 200{other}, {failed} requests failed")
        });
        let settled = settle_to(rig, before.fds).await?;
        let after = Sample::read(rig.pid(), Duration::ZERO)?;
        f.expect(settled.is_some(), || {
            format!(
                "flood {round}: descriptors not back to {} within {SETTLE:?}: {}",
                before.fds,
                after.describe()
            )
        });
        longest_settle = longest_settle.max(settled.unwrap_or(SETTLE).as_secs_f64());
        settled_levels.push(Sample {
            at: Duration::from_secs(u64::try_from(round)?),
            ..after
        });
    }
    let two_thirds = Duration::from_secs(u64::try_from(rounds * 2 / 3)?);
    let early = procstat::first_window_peak(&settled_levels, two_thirds).context("no flood")?;
    // Descriptors are checked after each flood (back to the idle level); here only memory.
    for later in settled_levels.iter().filter(|s| s.at > two_thirds) {
        if let Some(problem) = procstat::rss_growth(&early, later) {
            f.expect(false, || format!("flood {}: {problem}", later.at.as_secs()));
        }
    }
    let rss_after = |i: usize| settled_levels.get(i).map_or(0.0, Sample::rss_mib);
    let floods = settled_levels.len();
    f.saw(format!(
        "{floods} floods of {n}: {answered}/{} × 200, each flood ≤ {longest_flood:.1} s, slowest answer {slowest_answer:.1} s",
        floods * n
    ));
    f.saw(format!(
        "highest during the floods: {}; descriptors back to {} after each (≤ {longest_settle:.1} s)",
        highest.describe(),
        before.fds
    ));
    f.saw(format!(
        "rss after flood 1 / {} / {floods}: {:.1} / {:.1} / {:.1} MiB (idle before: {})",
        floods * 2 / 3,
        rss_after(0),
        rss_after((floods * 2 / 3).saturating_sub(1)),
        rss_after(floods.saturating_sub(1)),
        before.describe()
    ));
    Ok(())
}
