//! TEST ONLY: turns the capability masks /proc/PID/status prints (CapEff,
//! CapBnd, ...) into names and back, for integration/lib.sh, so the
//! engine tests compare sets of names instead of hard-coded hex strings.
//!
//! ```text
//! gg-capset decode HEX      sorted CAP_ names of the set bits, one line, space separated
//! gg-capset encode NAME...  the mask, 16 hex digits as /proc prints it
//! gg-capset names NAME...   the names, canonical and sorted (same format as decode)
//! ```
//! Names may be given in any case, with or without `CAP_`. An unknown name,
//! or a set bit no known capability has, is an error (exit 1): a test must
//! never pass because a name was dropped.

use std::process::ExitCode;

use caps::Capability;

fn parse(name: &str) -> Result<Capability, String> {
    caps::to_canonical(name.trim())
        .parse()
        .map_err(|_| format!("unknown capability `{name}`"))
}

fn sorted_line(mut names: Vec<String>) -> String {
    names.sort();
    names.dedup();
    names.join(" ")
}

fn decode(hex: &str) -> Result<String, String> {
    let digits = hex.trim().trim_start_matches("0x");
    let mask =
        u64::from_str_radix(digits, 16).map_err(|e| format!("`{hex}` is not a hex mask: {e}"))?;
    let known = caps::all();
    let names: Vec<String> = known
        .iter()
        .filter(|c| mask & c.bitmask() != 0)
        .map(|c| c.to_string())
        .collect();
    let unknown = known.iter().fold(mask, |m, c| m & !c.bitmask());
    if unknown != 0 {
        return Err(format!(
            "mask {hex} has bits no known capability has: {unknown:#x}"
        ));
    }
    Ok(sorted_line(names))
}

fn names(args: &[String]) -> Result<Vec<Capability>, String> {
    args.iter()
        .flat_map(|a| a.split([' ', ',']))
        .filter(|a| !a.is_empty())
        .map(parse)
        .collect()
}

fn run(args: &[String]) -> Result<String, String> {
    match args.first().map(String::as_str) {
        Some("decode") if args.len() == 2 => decode(&args[1]),
        Some("encode") => {
            let mask = names(&args[1..])?.iter().fold(0u64, |m, c| m | c.bitmask());
            Ok(format!("{mask:016x}"))
        }
        Some("names") => Ok(sorted_line(
            names(&args[1..])?.iter().map(|c| c.to_string()).collect(),
        )),
        _ => Err("usage: gg-capset decode HEX | encode NAME... | names NAME...".into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gg-capset: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_str(args: &[&str]) -> Result<String, String> {
        run(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn round_trips() {
        // Docker's default set as /proc/self/status shows it.
        let docker = "CAP_AUDIT_WRITE CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER CAP_FSETID CAP_KILL CAP_MKNOD CAP_NET_BIND_SERVICE CAP_NET_RAW CAP_SETFCAP CAP_SETGID CAP_SETPCAP CAP_SETUID CAP_SYS_CHROOT";
        assert_eq!(run_str(&["decode", "00000000a80425fb"]).unwrap(), docker);
        assert_eq!(run_str(&["encode", docker]).unwrap(), "00000000a80425fb");
        assert_eq!(
            run_str(&["names", "sys_admin", "CAP_CHOWN", "chown"]).unwrap(),
            "CAP_CHOWN CAP_SYS_ADMIN"
        );
        assert_eq!(run_str(&["decode", "0"]).unwrap(), "");
        assert_eq!(run_str(&["encode"]).unwrap(), "0000000000000000");
    }

    #[test]
    fn refuses_what_it_cannot_name() {
        assert!(run_str(&["encode", "CAP_NOPE"]).is_err());
        assert!(run_str(&["names", "CHOWN", "bogus"]).is_err());
        assert!(run_str(&["decode", "zz"]).is_err());
        assert!(run_str(&["decode", "8000000000000000"]).is_err());
        assert!(run_str(&["frobnicate"]).is_err());
    }
}
