//! A run's per-second figures as CSV (`<arm>.csv` beside the scorecard), and read back from
//! it (what `bench overload --replot` draws).

use super::report::{refuser_name, Polled, SecondTier, REFUSERS};
use brownout::tier::Tier;
use brownout_cli::config::CliConfig;
use std::fmt::Write;

/// A run's figures read back from its [`csv`] (what the chart draws: refusals by who, the
/// tiers summed, are kept on the first tier). Columns a CSV of an older run lacks read as
/// not known.
///
/// # Errors
/// The header lacks a column the chart needs, or a value is not a number.
pub fn from_csv(text: &str) -> std::result::Result<(Vec<[SecondTier; 4]>, Vec<Polled>), String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty")?.split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name);
    let need = |name: &str| column(name).ok_or(format!("no column {name}"));
    let tiers = |what: &str| -> std::result::Result<Vec<usize>, String> {
        Tier::ALL
            .iter()
            .map(|t| need(&format!("{what}_{}", t.as_str())))
            .collect()
    };
    let (ok, shed, timeouts, p99) = (
        tiers("ok")?,
        tiers("shed")?,
        tiers("timeouts")?,
        tiers("p99_seconds")?,
    );
    let refused: Vec<Option<usize>> = (0..REFUSERS)
        .map(|i| column(&format!("refused_by_{}", refuser_name(i))))
        .collect();
    let (amount, limit, demand) = (need("amount")?, need("adaptive_limit")?, need("demand")?);
    let (capacity, service) = (column("capacity"), column("service_seconds"));
    let mut per_second = Vec::new();
    let mut polled = Vec::new();
    for (n, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').collect();
        let number = |i: usize| -> std::result::Result<f64, String> {
            let cell = cells.get(i).copied().unwrap_or("");
            cell.parse::<f64>()
                .map_err(|_| format!("line {}: {cell:?} is not a number", n + 2))
        };
        let maybe = |i: Option<usize>| i.and_then(|i| number(i).ok()).unwrap_or(f64::NAN);
        let mut second = [SecondTier::default(); 4];
        for (t, cell) in second.iter_mut().enumerate() {
            cell.ok = number(ok[t])? as u32;
            cell.shed = number(shed[t])? as u32;
            cell.timeouts = number(timeouts[t])? as u32;
            cell.p99 = number(p99[t])?;
        }
        for (i, at) in refused.iter().enumerate() {
            second[0].refused[i] = at.map_or(Ok(0.0), number)? as u32;
        }
        per_second.push(second);
        polled.push(Polled {
            amount: number(amount)?,
            limit: number(limit)?,
            demand: number(demand)?,
            capacity: maybe(capacity),
            service: maybe(service),
        });
    }
    Ok((per_second, polled))
}

/// The per-second series of one arm.
pub fn csv(per_second: &[[SecondTier; 4]], polled: &[Polled]) -> String {
    let mut out = String::from("second,amount,adaptive_limit,demand");
    for what in ["ok", "shed", "timeouts", "p99_seconds"] {
        for t in Tier::ALL {
            let _ = write!(out, ",{what}_{}", t.as_str());
        }
    }
    for i in 0..REFUSERS {
        let _ = write!(out, ",refused_by_{}", refuser_name(i));
    }
    out.push_str(",capacity,service_seconds\n");
    for (i, s) in per_second.iter().enumerate() {
        let (amount, limit, demand) = polled.get(i).map_or_else(Default::default, |p| {
            let f = |x: f64, d: usize| format!("{x:.d$}");
            (f(p.amount, 4), f(p.limit, 2), f(p.demand, 3))
        });
        let _ = write!(out, "{i},{amount},{limit},{demand}");
        for field in 0..4 {
            for t in s {
                let v = [
                    f64::from(t.ok),
                    f64::from(t.shed),
                    f64::from(t.timeouts),
                    t.p99,
                ][field];
                let _ = write!(out, ",{v}");
            }
        }
        for who in 0..REFUSERS {
            let n: u32 = s.iter().map(|t| t.refused[who]).sum();
            let _ = write!(out, ",{n}");
        }
        if let Some(p) = polled.get(i) {
            let _ = write!(out, ",{:.2},{:.4}", p.capacity, p.service);
        } else {
            out.push_str(",,");
        }
        out.push('\n');
    }
    out
}

/// Draws each arm's chart again from its CSV in `args.out` (a run's figures, with the chart
/// code of today), under `args`' phases.
pub(super) fn replot(
    configs: &[(String, CliConfig)],
    args: &super::OverloadArgs,
    phases: &[super::load::Phase],
) -> Result<(), String> {
    for (arm, c) in configs {
        let csv = args.out.join(format!("{arm}.csv"));
        let text = std::fs::read_to_string(&csv).map_err(|e| format!("{}: {e}", csv.display()))?;
        let (per_second, polled) =
            from_csv(&text).map_err(|e| format!("{}: {e}", csv.display()))?;
        let svg = args.out.join(format!("{arm}.svg"));
        super::chart::arm(
            &svg,
            (arm, super::chart::Loops::of(c)),
            &per_second,
            &polled,
            phases,
        )?;
        eprintln!("{}", svg.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use brownout::limiter::LimiterName;

    #[test]
    fn a_csv_reads_back_as_the_figures_it_was_written_from() {
        let mut second = [SecondTier::default(); 4];
        second[1].ok = 7;
        second[2].shed = 3;
        second[3].p99 = 0.25;
        second[2].refused[LimiterName::WorkerUtilization as usize] = 3;
        let polled = Polled {
            amount: 0.5,
            limit: 12.0,
            demand: 2.0,
            capacity: 8.0,
            service: 0.05,
        };
        let text = csv(&[second, second], &[polled, polled]);
        let (per_second, read) = from_csv(&text).unwrap();
        assert_eq!(per_second.len(), 2);
        assert_eq!((per_second[1][1].ok, per_second[1][2].shed), (7, 3));
        assert_eq!(per_second[1][3].p99, 0.25);
        let refused: u32 = per_second[1]
            .iter()
            .map(|t| t.refused[LimiterName::WorkerUtilization as usize])
            .sum();
        assert_eq!(refused, 3, "by who, the tiers summed");
        assert_eq!(
            (read[0].amount, read[0].limit, read[0].demand),
            (0.5, 12.0, 2.0)
        );
        assert!(from_csv("second,amount\n0,1\n")
            .unwrap_err()
            .contains("no column"));
    }
}
