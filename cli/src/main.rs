//! The `brownout` binary: runs the demo app with brownout embedded, and talks to a running
//! admin API (`brownout admin …`).

mod admin_cli;
#[cfg(feature = "tools")]
mod bench_redis;
#[cfg(feature = "tools")]
mod chart;
#[cfg(feature = "tools")]
mod overload;
#[cfg(feature = "tools")]
mod simulate_cli;

use brownout_cli::config::CliConfig;
use brownout_cli::demo::Demo;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    version,
    about = "Stripe-style rate limiters and load shedders for actix-web"
)]
struct Cli {
    /// The configuration file (default: ./config.yaml when there is one, else every key's
    /// default).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the demo app and the admin API (the default).
    Run,
    /// Validate the configuration file and exit.
    Check,
    /// Run the worker-utilization controller against a model of the server in virtual time.
    #[cfg(feature = "tools")]
    Simulate(simulate_cli::SimulateArgs),
    /// Measure brownout against other approaches (`bench overload`: the overload scorecard).
    #[cfg(feature = "tools")]
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Run the worker-utilization controller against a model of the server in virtual time
    /// (built with `--features tools`).
    #[cfg(not(feature = "tools"))]
    #[command(disable_help_flag = true)]
    Simulate(NotBuilt),
    /// Measure brownout: `bench overload`, `bench redis` (built with `--features tools`).
    #[cfg(not(feature = "tools"))]
    #[command(disable_help_flag = true)]
    Bench(NotBuilt),
    /// Talk to a running admin API (token from the variable named by admin.token_env).
    Admin {
        /// The admin API (default: http://<admin.bind>).
        #[arg(long)]
        url: Option<String>,
        #[command(subcommand)]
        command: admin_cli::AdminCommand,
    },
}

/// The arguments of a command this build leaves out, taken whole so that the answer is the
/// build to use rather than a parse error.
#[cfg(not(feature = "tools"))]
#[derive(clap::Args)]
struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
}

#[cfg(feature = "tools")]
#[derive(Subcommand)]
enum BenchCommand {
    /// The overload scorecard: every arm on a fresh demo process, the same open-loop load.
    Overload(overload::OverloadArgs),
    /// What fleet mode costs: decisions against a loopback Redis, beside INCR+EXPIRE.
    Redis(bench_redis::RedisArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let command = cli.command.unwrap_or(Command::Run);
    // A file named with --config must be there; without it, ./config.yaml if there is one,
    // else the defaults (every key has one) with the demo's critical route and test keys.
    let path = cli.config.or_else(|| {
        let here = PathBuf::from("config.yaml");
        here.exists().then_some(here)
    });
    let loaded = path
        .as_ref()
        .map_or_else(|| Ok(CliConfig::demo()), |p| CliConfig::load(p));
    let config = match loaded {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            if !cfg!(feature = "fleet") && e.to_string().contains("`redis` feature") {
                eprintln!(
                    "the brownout binary runs fleet mode when built with it: \
                     cargo run --release --features fleet"
                );
            }
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Admin { url, command } => admin_cli::run(&config.brownout, url, command),
        #[cfg(feature = "tools")]
        Command::Simulate(args) => simulate_cli::run(config, args),
        #[cfg(feature = "tools")]
        Command::Bench {
            command: BenchCommand::Overload(args),
        } => overload::run(config, args),
        #[cfg(feature = "tools")]
        Command::Bench {
            command: BenchCommand::Redis(args),
        } => bench_redis::run(args),
        #[cfg(not(feature = "tools"))]
        Command::Simulate(_) | Command::Bench(_) => {
            eprintln!(
                "error: simulate and bench are built with the `tools` feature, which the demo \
                 does not need: cargo run --release --features tools -- {}",
                std::env::args().skip(1).collect::<Vec<_>>().join(" ")
            );
            ExitCode::from(2)
        }
        Command::Check => {
            match &path {
                Some(path) => println!("{}: ok", path.display()),
                None => println!("no config.yaml here and no --config: the defaults are valid"),
            }
            ExitCode::SUCCESS
        }
        Command::Run => match actix_web::rt::System::new().block_on(run(config, path)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

async fn run(config: CliConfig, path: Option<PathBuf>) -> Result<(), brownout::Error> {
    // SIGHUP reloads `path` (admin.reload_on_sighup), installed by Brownout::start.
    let fewer = config.demo.capacity_drop == brownout_cli::config::CapacityDrop::Fewer;
    let demo = Demo::start_with_file(config, path.as_deref())?;
    #[cfg(unix)]
    {
        // Demo-only control for the overload scorecard's capacity drop.
        use tokio::signal::unix::{signal, SignalKind};
        let drop = signal(SignalKind::user_defined1());
        let restore = signal(SignalKind::user_defined2());
        if let (Ok(mut drop), Ok(mut restore)) = (drop, restore) {
            loop {
                tokio::select! {
                    _ = drop.recv() => if fewer {
                        tracing::info!("SIGUSR1: half the demo's workers are taken away");
                        demo.set_fewer_workers(true);
                    } else {
                        tracing::info!("SIGUSR1: the demo's service times double");
                        demo.set_slowdown(2);
                    },
                    _ = restore.recv() => {
                        tracing::info!("SIGUSR2: the demo's capacity is restored");
                        demo.set_slowdown(1);
                        demo.set_fewer_workers(false);
                    }
                    () = wait_for_signal() => break,
                }
            }
            tracing::info!("shutting down");
            demo.stop().await;
            return Ok(());
        }
    }
    wait_for_signal().await;
    tracing::info!("shutting down");
    demo.stop().await;
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
