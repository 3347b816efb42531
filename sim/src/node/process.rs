//! The "process" inside a simulated container: a scripted program, a Spark executor or the
//! fake Spark driver. It runs as a task; the kubelet delivers SIGTERM through `signals` and
//! implements SIGKILL by aborting the task.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::Shared;
use super::logs::{LogWriter, Stream};
use super::script::{Program, RunTime, Script, Sigterm};

/// A signal for the process. Later signals replace earlier ones; Term is never taken back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    None,
    /// SIGTERM from the kubelet (pod deletion).
    Term,
    /// A Spark executor's driver told it to shut down (dynamic allocation, end of the app).
    DriverShutdown,
}

/// How the process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exit {
    pub code: i32,
    /// Killed by the cgroup OOM killer: exit code 137, reason OOMKilled.
    pub oom: bool,
    /// What the process wrote to its termination message path.
    pub message: Option<String>,
    /// The container never ran its command (a process container whose namespaces or mounts
    /// could not be set up): the kubelet shows CreateContainerError with this message.
    pub start_error: Option<String>,
}

impl Exit {
    pub fn code(code: i32) -> Self {
        Self {
            code,
            oom: false,
            message: None,
            start_error: None,
        }
    }
}

/// What a process can see and use.
pub(crate) struct ProcessCtx {
    pub shared: Weak<Shared>,
    pub pod: Arc<Value>,
    pub container: Value,
    pub script: Script,
    pub log: Arc<LogWriter>,
    /// 0 for the first run of the container.
    pub restart: u32,
}

impl ProcessCtx {
    pub fn out(&self, line: &str) {
        self.log.line(Stream::Stdout, line);
    }

    pub fn err(&self, line: &str) {
        self.log.line(Stream::Stderr, line);
    }

    pub fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// The scripted exit of this run: OOM kill, or the exit code, with the exit log.
    pub fn scripted_exit(&self) -> Exit {
        for l in &self.script.exit_log {
            self.out(l);
        }
        if self.script.oom_kill {
            return Exit {
                code: 137,
                oom: true,
                message: self.script.termination_message.clone(),
                start_error: None,
            };
        }
        Exit {
            code: self.script.exit_code(self.restart),
            oom: false,
            message: self.script.termination_message.clone(),
            start_error: None,
        }
    }

    /// What the process does once SIGTERM arrives; never returns for `Sigterm::Ignore`.
    pub async fn on_sigterm(&self) -> Exit {
        match self.script.sigterm {
            Sigterm::Exit => {}
            Sigterm::After(d) => tokio::time::sleep(d).await,
            Sigterm::Ignore => std::future::pending::<()>().await,
        }
        Exit {
            code: self.script.sigterm_exit_code,
            oom: false,
            message: self.script.termination_message.clone(),
            start_error: None,
        }
    }
}

/// Waits until `signals` carries something other than `Signal::None`.
pub(crate) async fn next_signal(signals: &mut watch::Receiver<Signal>) -> Signal {
    loop {
        let s = *signals.borrow_and_update();
        if s != Signal::None {
            return s;
        }
        if signals.changed().await.is_err() {
            // The kubelet is gone: nobody will ever signal this process.
            std::future::pending::<()>().await;
        }
    }
}

/// Sleeps for a scripted run time (None or Forever: never wakes).
pub(crate) async fn run_for(run_time: Option<RunTime>, default: Option<Duration>) {
    match run_time.map(|r| match r {
        RunTime::For(d) => Some(d),
        RunTime::Forever => None,
    }) {
        Some(Some(d)) => tokio::time::sleep(d).await,
        Some(None) => std::future::pending::<()>().await,
        None => match default {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        },
    }
}

/// Runs the container's program to its end.
pub(crate) async fn run(ctx: ProcessCtx, signals: watch::Receiver<Signal>) -> Exit {
    for l in &ctx.script.log {
        ctx.out(l);
    }
    match ctx.script.program {
        Program::Script => run_script(ctx, signals).await,
        Program::SparkExecutor => run_executor(ctx, signals).await,
        Program::SparkDriver => super::spark_driver::run(ctx, signals).await,
    }
}

async fn run_script(ctx: ProcessCtx, mut signals: watch::Receiver<Signal>) -> Exit {
    tokio::select! {
        _ = run_for(ctx.script.run_time, None) => ctx.scripted_exit(),
        _ = next_signal(&mut signals) => ctx.on_sigterm().await,
    }
}

/// A Spark executor (`CoarseGrainedExecutorBackend`): it runs tasks until its driver shuts it
/// down (exit 0) or the kubelet sends SIGTERM (exit 143), unless scripted to end by itself.
async fn run_executor(ctx: ProcessCtx, mut signals: watch::Receiver<Signal>) -> Exit {
    let pod_name = crate::meta::name(&ctx.pod).to_string();
    ctx.out(&format!(
        "INFO CoarseGrainedExecutorBackend: Started daemon with process name: 1@{pod_name}"
    ));
    ctx.out("INFO CoarseGrainedExecutorBackend: Successfully registered with driver");
    tokio::select! {
        _ = run_for(ctx.script.run_time, if ctx.script.oom_kill { Some(Duration::ZERO) } else { None }) => {
            if !ctx.script.oom_kill && ctx.script.exit_code(ctx.restart) != 0 {
                ctx.err("ERROR Executor: Exception in task 0.0 in stage 0.0 (TID 0)");
            }
            ctx.scripted_exit()
        }
        sig = next_signal(&mut signals) => match sig {
            Signal::DriverShutdown => {
                ctx.out("INFO CoarseGrainedExecutorBackend: Driver commanded a shutdown");
                ctx.out("INFO MemoryStore: MemoryStore cleared");
                ctx.out("INFO ShutdownHookManager: Shutdown hook called");
                Exit::code(0)
            }
            _ => {
                ctx.err("ERROR CoarseGrainedExecutorBackend: RECEIVED SIGNAL TERM");
                ctx.out("INFO ShutdownHookManager: Shutdown hook called");
                ctx.on_sigterm().await
            }
        },
    }
}
