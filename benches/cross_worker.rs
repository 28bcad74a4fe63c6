//! `cargo bench -p ring-bench --bench cross_worker [-- --rounds N --pings N --msgs N]`:
//! wake-ups and messages between two workers, over a runtime-agnostic channel
//! (`tokio::sync::mpsc`), for each way a wake can cross:
//!
//! - `ring-msg_ring`: ring-rt, 2 io_uring workers; a wake is an `IORING_OP_MSG_RING` CQE
//!   posted into the other worker's ring (5.18+);
//! - `ring-eventfd`: the same with `msg_ring` masked: an eventfd write, and the receiving
//!   worker's poll on its eventfd;
//! - `ring-epoll`: ring-rt on epoll (eventfd);
//! - `tokio-mt`: tokio's multi_thread runtime with 2 worker threads, the two tasks spawned
//!   from outside (tokio places and steals them as it likes).
//!
//! Two measures, each run `--rounds` times, the runtimes interleaved round by round so
//! load from elsewhere on the machine hits them alike; medians with min..max:
//! - ping-pong: a task on worker 0 sends a number, a task on worker 1 sends it back,
//!   `--pings` times (capacity-1 channels): microseconds per round trip, and the process's
//!   CPU per round trip;
//! - stream: worker 1 sends `--msgs` numbers into a 256-slot channel, worker 0 receives
//!   them: messages per second, and CPU per message.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ring_bench::stats::{median_range, self_cpu};
use ring_rt::{BackendKind, Builder, FeatureMask};

#[derive(Clone, Copy, PartialEq)]
enum Rt {
    MsgRing,
    Eventfd,
    Epoll,
    TokioMt,
}

impl Rt {
    const ALL: [Rt; 4] = [Rt::MsgRing, Rt::Eventfd, Rt::Epoll, Rt::TokioMt];

    fn name(self) -> &'static str {
        match self {
            Rt::MsgRing => "ring-msg_ring",
            Rt::Eventfd => "ring-eventfd",
            Rt::Epoll => "ring-epoll",
            Rt::TokioMt => "tokio-mt",
        }
    }

    fn ring_builder(self) -> Option<Builder> {
        let b = Builder::default().threads(2);
        match self {
            Rt::MsgRing => Some(b.backend(BackendKind::Uring)),
            Rt::Eventfd => Some(
                b.backend(BackendKind::Uring)
                    .feature_mask(FeatureMask::parse("-msg_ring").expect("a known feature")),
            ),
            Rt::Epoll => Some(b.backend(BackendKind::Epoll)),
            Rt::TokioMt => None,
        }
    }
}

/// One measurement: wall time, process CPU, and how many operations.
struct Sample {
    wall: Duration,
    cpu: Duration,
    ops: u64,
}

impl Sample {
    /// `ops` done since `start`, with the process's CPU time then.
    fn since(start: Instant, cpu: Duration, ops: u32) -> Sample {
        Sample {
            wall: start.elapsed(),
            cpu: self_cpu() - cpu,
            ops: u64::from(ops),
        }
    }
}

fn ping_pong_ring(builder: &Builder, pings: u32) -> std::io::Result<Sample> {
    let rt = builder.build()?;
    let (to_one, mut at_one) = tokio::sync::mpsc::channel::<u32>(1);
    let (to_zero, mut at_zero) = tokio::sync::mpsc::channel::<u32>(1);
    let echo = rt.handle().spawn_on(1, async move {
        while let Some(n) = at_one.recv().await {
            if to_zero.send(n).await.is_err() {
                break;
            }
        }
    })?;
    let (start, cpu) = (Instant::now(), self_cpu());
    rt.block_on(async {
        for n in 0..pings {
            to_one.send(n).await.expect("the echo task runs");
            at_zero.recv().await.expect("the echo task answers");
        }
    });
    let sample = Sample::since(start, cpu, pings);
    drop(to_one);
    rt.block_on(echo).expect("the echo task ends");
    Ok(sample)
}

fn stream_ring(builder: &Builder, msgs: u32) -> std::io::Result<Sample> {
    let rt = builder.build()?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(256);
    let (start, cpu) = (Instant::now(), self_cpu());
    let producer = rt.handle().spawn_on(1, async move {
        for n in 0..msgs {
            tx.send(n).await.expect("the consumer runs");
        }
    })?;
    rt.block_on(async {
        let mut got = 0;
        while rx.recv().await.is_some() {
            got += 1;
        }
        assert_eq!(got, msgs);
    });
    let sample = Sample::since(start, cpu, msgs);
    rt.block_on(producer).expect("the producer ends");
    Ok(sample)
}

fn tokio_mt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime")
}

fn ping_pong_tokio(pings: u32) -> Sample {
    let rt = tokio_mt();
    let (to_one, mut at_one) = tokio::sync::mpsc::channel::<u32>(1);
    let (to_zero, mut at_zero) = tokio::sync::mpsc::channel::<u32>(1);
    let echo = rt.spawn(async move {
        while let Some(n) = at_one.recv().await {
            if to_zero.send(n).await.is_err() {
                break;
            }
        }
    });
    let (start, cpu) = (Instant::now(), self_cpu());
    let pinger = rt.spawn(async move {
        for n in 0..pings {
            to_one.send(n).await.expect("the echo task runs");
            at_zero.recv().await.expect("the echo task answers");
        }
    });
    rt.block_on(pinger).expect("the pinger ends");
    let sample = Sample::since(start, cpu, pings);
    rt.block_on(echo).expect("the echo task ends");
    sample
}

fn stream_tokio(msgs: u32) -> Sample {
    let rt = tokio_mt();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(256);
    let (start, cpu) = (Instant::now(), self_cpu());
    let producer = rt.spawn(async move {
        for n in 0..msgs {
            tx.send(n).await.expect("the consumer runs");
        }
    });
    let consumer = rt.spawn(async move {
        let mut got = 0;
        while rx.recv().await.is_some() {
            got += 1;
        }
        got
    });
    assert_eq!(rt.block_on(consumer).expect("the consumer ends"), msgs);
    let sample = Sample::since(start, cpu, msgs);
    rt.block_on(producer).expect("the producer ends");
    sample
}

struct Args {
    rounds: usize,
    pings: u32,
    msgs: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        rounds: 5,
        pings: 20_000,
        msgs: 200_000,
    };
    // cargo bench passes --bench; anything else is ours.
    let mut flags =
        ring_demo::flags::Flags::new(std::env::args().skip(1).filter(|a| a != "--bench"));
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--rounds" => args.rounds = flags.value::<usize>()?.max(1),
            "--pings" => args.pings = flags.value::<u32>()?.max(1),
            "--msgs" => args.msgs = flags.value::<u32>()?.max(1),
            _ => return Err(flags.unknown()),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cross_worker: {e}\nusage: cross_worker [--rounds N] [--pings N] [--msgs N]");
            return ExitCode::from(2);
        }
    };
    let mut pings: Vec<Vec<Sample>> = Rt::ALL.iter().map(|_| Vec::new()).collect();
    let mut streams: Vec<Vec<Sample>> = Rt::ALL.iter().map(|_| Vec::new()).collect();
    let mut skipped = Vec::new();
    for _ in 0..args.rounds {
        for (i, rt) in Rt::ALL.iter().enumerate() {
            let (p, s) = match rt.ring_builder() {
                Some(b) => match (ping_pong_ring(&b, args.pings), stream_ring(&b, args.msgs)) {
                    (Ok(p), Ok(s)) => (p, s),
                    (Err(e), _) | (_, Err(e)) => {
                        skipped.push(format!("{}: {e}", rt.name()));
                        continue;
                    }
                },
                None => (ping_pong_tokio(args.pings), stream_tokio(args.msgs)),
            };
            pings[i].push(p);
            streams[i].push(s);
        }
    }
    println!(
        "cross_worker: {} rounds, {} round trips and {} streamed messages per round (medians, min..max)",
        args.rounds, args.pings, args.msgs
    );
    println!(
        "| runtime | round trip µs | CPU µs per round trip | stream msgs/s | CPU ns per msg |"
    );
    println!("|---|---|---|---|---|");
    for (i, rt) in Rt::ALL.iter().enumerate() {
        if pings[i].is_empty() {
            continue;
        }
        let rtt = median_range(
            pings[i]
                .iter()
                .map(|s| s.wall.as_secs_f64() * 1e6 / s.ops as f64)
                .collect(),
        );
        let rtt_cpu = median_range(
            pings[i]
                .iter()
                .map(|s| s.cpu.as_secs_f64() * 1e6 / s.ops as f64)
                .collect(),
        );
        let rate = median_range(
            streams[i]
                .iter()
                .map(|s| s.ops as f64 / s.wall.as_secs_f64())
                .collect(),
        );
        let msg_cpu = median_range(
            streams[i]
                .iter()
                .map(|s| s.cpu.as_secs_f64() * 1e9 / s.ops as f64)
                .collect(),
        );
        println!(
            "| {} | {:.2} ({:.2}..{:.2}) | {:.2} ({:.2}..{:.2}) | {:.0} ({:.0}..{:.0}) | {:.0} ({:.0}..{:.0}) |",
            rt.name(),
            rtt.0, rtt.1, rtt.2,
            rtt_cpu.0, rtt_cpu.1, rtt_cpu.2,
            rate.0, rate.1, rate.2,
            msg_cpu.0, msg_cpu.1, msg_cpu.2,
        );
    }
    skipped.dedup();
    for s in skipped {
        println!("skipped {s}");
    }
    ExitCode::SUCCESS
}
