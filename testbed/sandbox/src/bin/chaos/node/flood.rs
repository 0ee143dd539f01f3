//! The flood row's measure, for any `/healthz` a node sidecar serves (livenessprobe's, the
//! registrar's `--health-port`): `rounds` floods of `n` requests at once, each on its own
//! connection as kubelet's prober and a scraper each open their own. Every answer must be 200,
//! the descriptors must be back to the idle level after each flood, and the memory after the
//! last flood must not be above the first two thirds' peak (+10 %): a leak grows by the same
//! amount each flood, so the last flood is its highest; memory the allocator keeps levels off,
//! and may stay at a flood's peak for a few floods before it is returned (one whole-suite run
//! of 6 Dec 2026 held 63 MiB after floods 27-29 of 30, against 55 before and 53 after, which
//! an earlier check of every flood of the last third counted as growth).

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
    // Descriptors are checked after each flood (back to the idle level); here only memory.
    if let Some(problem) = memory_growth(&settled_levels)? {
        f.expect(false, || problem);
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

/// Whether memory grew over the floods: the level after the last one (`levels` are the levels
/// after each flood, `at` its number) above the peak of the first two thirds by more than
/// [`procstat::rss_growth`]'s slack.
fn memory_growth(levels: &[Sample]) -> anyhow::Result<Option<String>> {
    let two_thirds = Duration::from_secs(u64::try_from(levels.len() * 2 / 3)?);
    let early = procstat::first_window_peak(levels, two_thirds).context("no flood")?;
    let last = levels.last().context("no flood")?;
    Ok(procstat::rss_growth(&early, last)
        .map(|problem| format!("flood {}: {problem}", last.at.as_secs())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(mib: &[u64]) -> Vec<Sample> {
        (1..)
            .zip(mib)
            .map(|(round, mib)| Sample {
                at: Duration::from_secs(round),
                rss_kib: mib * 1024,
                fds: 10,
                sockets: 4,
                threads: 1,
            })
            .collect()
    }

    #[test]
    fn memory_grows_when_the_last_flood_ends_above_the_first_two_thirds() {
        let mut transient = vec![50; 30];
        transient[26..29].copy_from_slice(&[63, 63, 63]);
        for (name, mib, grew) in [
            ("flat", vec![50; 30], false),
            (
                "levels off late but within the slack",
                (40..70).map(|m| m.min(54)).collect(),
                false,
            ),
            ("held for a few floods, then returned", transient, false),
            ("a leak of 1 MiB a flood", (40..70).collect(), true),
            ("a step at the end", [vec![50; 29], vec![56]].concat(), true),
        ] {
            let problem = memory_growth(&levels(&mib)).unwrap();
            assert_eq!(problem.is_some(), grew, "{name}: {problem:?}");
        }
        let problem = memory_growth(&levels(&(40..70).collect::<Vec<_>>()))
            .unwrap()
            .unwrap();
        assert!(
            problem.starts_with("flood 30: rss 70656 KiB at the end"),
            "{problem}"
        );
        assert!(memory_growth(&[]).is_err());
    }
}
