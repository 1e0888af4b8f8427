//! Judging a parsed [`Requirement`] against host facts, one GPU at a
//! time, as libnvidia-container src/cli/dsl.c evaluates it, and how a
//! failure fares under forward and minor-version compatibility.

use super::{AllOf, Factor, Key, Op, Operand, Requirement};
use crate::core::facts::Gpu;
use crate::core::version::Version;

impl Op {
    fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            Op::Eq => ord == Equal,
            Op::Ne => ord != Equal,
            Op::Lt => ord == Less,
            Op::Le => ord != Greater,
            Op::Gt => ord == Greater,
            Op::Ge => ord != Less,
        }
    }
}

/// The host values a requirement is judged against, for one GPU (or none).
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub driver: Option<&'a Version>,
    pub driver_text: Option<&'a str>,
    pub cuda: Option<&'a Version>,
    /// None when the container sees no GPU: arch and brand then pass (dsl.c
    /// evaluates them per selected device only).
    pub gpu: Option<&'a Gpu>,
}

/// A three-valued result: facts can be missing (compute capability from the
/// /proc fallback), and "cannot judge" must not read as a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Unknown(String),
}

impl Factor {
    /// Judges one factor; a failure says why with the host value.
    pub fn eval(&self, ctx: &Context) -> Outcome {
        // Unknown keys are dropped at parse time; none reaches here.
        let key = match self.key {
            Some(k) => k,
            None => return Outcome::Pass,
        };
        match (&self.operand, key) {
            (Operand::Version(want), Key::Cuda) => match ctx.cuda {
                Some(have) if self.op.holds(have.cmp(want)) => Outcome::Pass,
                Some(have) => Outcome::Fail(match ctx.driver_text {
                    Some(d) => format!("driver {d} provides CUDA {have}"),
                    None => format!("the host provides CUDA {have}"),
                }),
                None => Outcome::Unknown("the host's CUDA version is unknown".into()),
            },
            (Operand::Version(want), Key::Driver) => match (ctx.driver, ctx.driver_text) {
                (Some(have), _) if self.op.holds(have.cmp(want)) => Outcome::Pass,
                (Some(have), text) => {
                    Outcome::Fail(format!("driver is {}", text.unwrap_or(have.as_str())))
                }
                (None, _) => Outcome::Unknown("the host's driver version is unknown".into()),
            },
            (Operand::Version(want), Key::Arch) => {
                let gpu = match ctx.gpu {
                    Some(g) => g,
                    None => return Outcome::Pass,
                };
                match gpu.compute_capability.as_deref().map(Version::parse) {
                    Some(Ok(have)) if self.op.holds(have.cmp(want)) => Outcome::Pass,
                    Some(Ok(have)) => {
                        Outcome::Fail(format!("GPU {} has compute capability {have}", gpu.index))
                    }
                    _ => Outcome::Unknown(format!(
                        "the compute capability of GPU {} is unknown",
                        gpu.index
                    )),
                }
            }
            (Operand::Brand(want), Key::Brand) => {
                let gpu = match ctx.gpu {
                    Some(g) => g,
                    None => return Outcome::Pass,
                };
                // An empty brand is not an NVML brand (NVML's own "unknown"
                // is one, and CUDA images list `brand=unknown`): it means the
                // facts' source could not tell (Kubernetes node labels,
                // fleet/nodes.rs), so the factor cannot be judged.
                if gpu.brand.is_empty() {
                    return Outcome::Unknown(format!("the brand of GPU {} is unknown", gpu.index));
                }
                let same = gpu.brand.eq_ignore_ascii_case(want);
                if (self.op == Op::Eq) == same {
                    Outcome::Pass
                } else {
                    Outcome::Fail(format!("GPU {} is {}", gpu.index, gpu.brand))
                }
            }
            // parse_factor pairs operands with keys; nothing else is built.
            _ => Outcome::Pass,
        }
    }
}

/// Why one alternative did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermResult {
    pub term: String,
    pub outcome: Outcome,
    /// The factor that decided the outcome (first failing, else first unknown).
    pub factor: Option<String>,
    /// The key of that factor.
    pub key: Option<Key>,
}

impl AllOf {
    pub fn eval(&self, ctx: &Context) -> TermResult {
        let mut unknown: Option<(&Factor, String)> = None;
        for f in &self.factors {
            match f.eval(ctx) {
                Outcome::Pass => {}
                Outcome::Fail(why) => {
                    return TermResult {
                        term: self.text.clone(),
                        outcome: Outcome::Fail(why),
                        factor: Some(f.text.clone()),
                        key: f.key,
                    }
                }
                Outcome::Unknown(why) => {
                    if unknown.is_none() {
                        unknown = Some((f, why));
                    }
                }
            }
        }
        match unknown {
            Some((f, why)) => TermResult {
                term: self.text.clone(),
                outcome: Outcome::Unknown(why),
                factor: Some(f.text.clone()),
                key: f.key,
            },
            None => TermResult {
                term: self.text.clone(),
                outcome: Outcome::Pass,
                factor: None,
                key: None,
            },
        }
    }
}

/// A requirement judged for one GPU context.
#[derive(Clone, Debug)]
pub struct Judgement {
    pub outcome: RequirementOutcome,
    /// Every alternative's result, in order (empty when one passed early).
    pub terms: Vec<TermResult>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequirementOutcome {
    Holds,
    Fails,
    CannotJudge,
}

impl Requirement {
    /// At least one alternative must hold. An empty requirement holds.
    pub fn judge(&self, ctx: &Context) -> Judgement {
        let mut terms = Vec::with_capacity(self.any_of.len());
        for t in &self.any_of {
            let r = t.eval(ctx);
            if r.outcome == Outcome::Pass {
                return Judgement {
                    outcome: RequirementOutcome::Holds,
                    terms: Vec::new(),
                };
            }
            terms.push(r);
        }
        if terms.is_empty() {
            return Judgement {
                outcome: RequirementOutcome::Holds,
                terms,
            };
        }
        let outcome = if terms
            .iter()
            .any(|t| matches!(t.outcome, Outcome::Unknown(_)))
        {
            RequirementOutcome::CannotJudge
        } else {
            RequirementOutcome::Fails
        };
        Judgement { outcome, terms }
    }

    /// The `cuda>=X` (or `cuda>X`, `cuda=X`) floor this requirement's
    /// alternatives ask for, the smallest one: what a driver upgrade must reach.
    pub fn cuda_floor(&self) -> Option<&Version> {
        self.any_of
            .iter()
            .flat_map(|t| t.factors.iter())
            .filter(|f| f.key == Some(Key::Cuda) && matches!(f.op, Op::Ge | Op::Gt | Op::Eq))
            .filter_map(|f| match &f.operand {
                Operand::Version(v) => Some(v),
                _ => None,
            })
            .min()
    }

    /// The `arch>=X` floor, for "needs compute capability X" fixes.
    pub fn arch_floor(&self) -> Option<&Version> {
        self.any_of
            .iter()
            .flat_map(|t| t.factors.iter())
            .filter(|f| f.key == Some(Key::Arch) && matches!(f.op, Op::Ge | Op::Gt | Op::Eq))
            .filter_map(|f| match &f.operand {
                Operand::Version(v) => Some(v),
                _ => None,
            })
            .min()
    }
}

/// How a failed requirement fares under CUDA minor-version compatibility
/// ([`Requirement::minor_version`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MinorVersion {
    /// Some alternative holds once its `cuda>=X.Y` factors that fail only on
    /// the minor version (same major as the host's CUDA) are let pass;
    /// `needs` is the highest such X.Y.
    Admits { needs: Version },
    /// Some alternative fails only on `cuda` factors, but one of them asks
    /// for a newer major than the host's: minor-version compatibility
    /// cannot cover a major-version gap.
    MajorGap { needs: Version },
    /// No alternative fails on CUDA alone (or the host's CUDA is unknown).
    NotCuda,
}

impl AllOf {
    /// Is there a `driver<X`, `driver<=X` or `driver=X` factor? Official
    /// images write their forward-compatibility alternatives as
    /// `brand=B,driver>=N,driver<N+1`: an upper bound on the driver is what
    /// tells such an alternative from one the driver meets natively (a newer
    /// driver always runs older CUDA, so no native alternative needs one).
    fn has_driver_upper_bound(&self) -> bool {
        self.factors
            .iter()
            .any(|f| f.key == Some(Key::Driver) && matches!(f.op, Op::Lt | Op::Le | Op::Eq))
    }

    /// The `cuda` floors (`>=`, `>`, `=`) of this alternative.
    fn cuda_floors(&self) -> impl Iterator<Item = &Version> {
        self.factors
            .iter()
            .filter(|f| f.key == Some(Key::Cuda) && matches!(f.op, Op::Ge | Op::Gt | Op::Eq))
            .filter_map(|f| match &f.operand {
                Operand::Version(v) => Some(v),
                _ => None,
            })
    }

    /// Whether a `cuda` factor of this alternative fails on `ctx`.
    fn fails_on_cuda(&self, ctx: &Context) -> bool {
        self.factors
            .iter()
            .any(|f| f.key == Some(Key::Cuda) && matches!(f.eval(ctx), Outcome::Fail(_)))
    }

    /// Holds when every failing factor is a `cuda>=X.Y`/`cuda>X.Y` the
    /// host's CUDA misses, on the minor version only unless `major_too`:
    /// returns the highest such X.Y; None when another factor fails or is
    /// unknown, or nothing failed.
    fn holds_but_for_cuda(&self, ctx: &Context, major_too: bool) -> Option<Version> {
        let have = ctx.cuda?;
        let mut needs: Option<&Version> = None;
        for f in &self.factors {
            match f.eval(ctx) {
                Outcome::Pass => {}
                Outcome::Unknown(_) => return None,
                Outcome::Fail(_) => {
                    let Operand::Version(want) = &f.operand else {
                        return None;
                    };
                    let relaxable = f.key == Some(Key::Cuda)
                        && matches!(f.op, Op::Ge | Op::Gt)
                        && (major_too || want.major() == have.major());
                    if !relaxable {
                        return None;
                    }
                    if !needs.is_some_and(|n| want <= n) {
                        needs = Some(want);
                    }
                }
            }
        }
        needs.cloned()
    }
}

impl Requirement {
    /// The CUDA version this requirement needs natively when it holds on
    /// `ctx` only through forward compatibility; None otherwise.
    ///
    /// Precisely: some alternative with a driver upper bound
    /// ([`AllOf::has_driver_upper_bound`]) holds, no alternative without one
    /// holds, and at least one alternative without one fails on a `cuda`
    /// factor. The result is the smallest `cuda` floor among those
    /// alternatives: the CUDA the image asks for natively. A requirement
    /// that bounds the driver without asking for any CUDA (`driver>=450,driver<600`)
    /// is a plain driver range, not forward compatibility.
    pub fn forward_compat_only(&self, ctx: &Context) -> Option<Version> {
        let (bounded, native): (Vec<&AllOf>, Vec<&AllOf>) =
            self.any_of.iter().partition(|t| t.has_driver_upper_bound());
        if !bounded.iter().any(|t| t.eval(ctx).outcome == Outcome::Pass) {
            return None;
        }
        if native.iter().any(|t| t.eval(ctx).outcome == Outcome::Pass) {
            return None;
        }
        native
            .iter()
            .filter(|t| t.fails_on_cuda(ctx))
            .flat_map(|t| t.cuda_floors())
            .min()
            .cloned()
    }

    /// Judges a requirement that fails on `ctx` under CUDA minor-version
    /// compatibility: see [`MinorVersion`]. Only `cuda>=`/`cuda>` factors
    /// are relaxed; `driver`, `arch` and `brand` factors must hold as written.
    pub fn minor_version(&self, ctx: &Context) -> MinorVersion {
        let admits = self
            .any_of
            .iter()
            .filter_map(|t| t.holds_but_for_cuda(ctx, false))
            .min();
        if let Some(needs) = admits {
            return MinorVersion::Admits { needs };
        }
        match self
            .any_of
            .iter()
            .filter_map(|t| t.holds_but_for_cuda(ctx, true))
            .min()
        {
            Some(needs) => MinorVersion::MajorGap { needs },
            None => MinorVersion::NotCuda,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, brand: &str, cc: Option<&str>) -> Gpu {
        Gpu {
            index,
            uuid: format!("GPU-{index}"),
            name: "Test GPU".into(),
            brand: brand.into(),
            compute_capability: cc.map(String::from),
            ..Default::default()
        }
    }

    fn judge(req: &str, driver: &str, cuda: &str, g: Option<&Gpu>) -> RequirementOutcome {
        let r = Requirement::parse("NVIDIA_REQUIRE_CUDA", req).unwrap();
        let d = Version::parse(driver).unwrap();
        let c = Version::parse(cuda).unwrap();
        r.judge(&Context {
            driver: Some(&d),
            driver_text: Some(driver),
            cuda: Some(&c),
            gpu: g,
        })
        .outcome
    }

    #[test]
    fn or_and_semantics() {
        let t = gpu(0, "tesla", Some("8.0"));
        assert_eq!(
            judge("cuda>=12.4", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Fails
        );
        assert_eq!(
            judge("cuda>=12.2", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("cuda>=12.2.1", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Fails
        );
        assert_eq!(
            judge(
                "cuda>=12.4 brand=tesla,driver>=535,driver<536",
                "535.104.05",
                "12.2",
                Some(&t)
            ),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge(
                "cuda>=12.4 brand=tesla,driver>=470,driver<471",
                "535.104.05",
                "12.2",
                Some(&t)
            ),
            RequirementOutcome::Fails
        );
        assert_eq!(
            judge("driver>535.54.03", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("arch>=8.0", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("arch>8.0", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Fails
        );
        assert_eq!(
            judge("arch=8", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("brand=TESLA", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("brand!=tesla", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Fails
        );
        assert_eq!(
            judge("", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Holds
        );
        // unknown keys are ignored
        assert_eq!(
            judge("cudnn>=99", "535.104.05", "12.2", Some(&t)),
            RequirementOutcome::Holds
        );
    }

    #[test]
    fn unknown_keys_are_dropped_as_nvidia_go_does() {
        let r = Requirement::parse("N", "cuda>=11.6 foo=bar").unwrap();
        assert_eq!(r.any_of.len(), 1);
        assert_eq!(r.dropped_terms, ["foo=bar"]);
        assert!(!r.imposes_nothing());
        let r = Requirement::parse("N", "cuda>=12.4,foo=1").unwrap();
        assert_eq!(r.any_of[0].factors.len(), 1);
        assert!(r.dropped_terms.is_empty());
        let r = Requirement::parse("N", "foo=bar cudnn>=8,X<1").unwrap();
        assert!(r.any_of.is_empty() && r.imposes_nothing());
        assert_eq!(r.unknown_keys.len(), 3);
        assert!(!Requirement::parse("N", "").unwrap().imposes_nothing());
        // `foo=bar` no longer satisfies it on its own
        assert_eq!(
            judge("cuda>=12.4 foo=bar", "535.104.05", "12.2", None),
            RequirementOutcome::Fails
        );
        assert_eq!(
            judge("foo=bar", "535.104.05", "12.2", None),
            RequirementOutcome::Holds
        );
    }

    #[test]
    fn no_gpu_passes_arch_and_brand_only() {
        assert_eq!(
            judge("arch>=9.0", "535.104.05", "12.2", None),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("brand=geforce", "535.104.05", "12.2", None),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("cuda>=12.4", "535.104.05", "12.2", None),
            RequirementOutcome::Fails
        );
    }

    #[test]
    fn empty_brand_cannot_be_judged_but_nvml_unknown_is_a_brand() {
        // Node labels cannot tell the brand: neither a pass nor a failure.
        let g = gpu(0, "", Some("8.0"));
        for r in ["brand=tesla", "brand!=tesla", "brand=unknown"] {
            assert_eq!(
                judge(r, "535.104.05", "12.2", Some(&g)),
                RequirementOutcome::CannotJudge,
                "{r}"
            );
        }
        // A failing alternative elsewhere does not turn it into a failure.
        assert_eq!(
            judge(
                "cuda>=12.4 brand=tesla,driver>=535,driver<536",
                "535.104.05",
                "12.2",
                Some(&g)
            ),
            RequirementOutcome::CannotJudge
        );
        // NVML's own "unknown" brand is a brand, as in NVIDIA's images.
        let u = gpu(0, "unknown", Some("8.0"));
        assert_eq!(
            judge("brand=unknown", "535.104.05", "12.2", Some(&u)),
            RequirementOutcome::Holds
        );
        assert_eq!(
            judge("brand=tesla", "535.104.05", "12.2", Some(&u)),
            RequirementOutcome::Fails
        );
    }

    #[test]
    fn unknown_compute_capability_cannot_be_judged() {
        let g = gpu(0, "tesla", None);
        assert_eq!(
            judge("arch>=8.0", "535.104.05", "12.2", Some(&g)),
            RequirementOutcome::CannotJudge
        );
        // another alternative holding still decides
        assert_eq!(
            judge("arch>=8.0 cuda>=12.0", "535.104.05", "12.2", Some(&g)),
            RequirementOutcome::Holds
        );
        // a definite failure in the same alternative wins over unknown
        assert_eq!(
            judge("arch>=8.0,cuda>=13", "535.104.05", "12.2", Some(&g)),
            RequirementOutcome::Fails
        );
    }

    #[test]
    fn reasons_name_host_values() {
        let g = gpu(1, "geforce", Some("8.9"));
        let r = Requirement::parse(
            "NVIDIA_REQUIRE_CUDA",
            "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=geforce,driver>=535,driver<536",
        )
        .unwrap();
        let d = Version::parse("545.23.06").unwrap();
        let c = Version::parse("12.3").unwrap();
        let j = r.judge(&Context {
            driver: Some(&d),
            driver_text: Some("545.23.06"),
            cuda: Some(&c),
            gpu: Some(&g),
        });
        assert_eq!(j.outcome, RequirementOutcome::Fails);
        assert_eq!(
            j.terms[0].outcome,
            Outcome::Fail("driver 545.23.06 provides CUDA 12.3".into())
        );
        assert_eq!(j.terms[1].outcome, Outcome::Fail("GPU 1 is geforce".into()));
        assert_eq!(j.terms[2].factor.as_deref(), Some("driver<536"));
        assert_eq!(
            j.terms[2].outcome,
            Outcome::Fail("driver is 545.23.06".into())
        );
        assert_eq!(
            r.cuda_floor().map(|v| v.to_string()).as_deref(),
            Some("12.4")
        );
    }

    fn ctx_eval<T>(
        req: &str,
        driver: &str,
        cuda: &str,
        g: Option<&Gpu>,
        f: impl Fn(&Requirement, &Context) -> T,
    ) -> T {
        let r = Requirement::parse("NVIDIA_REQUIRE_CUDA", req).unwrap();
        let d = Version::parse(driver).unwrap();
        let c = Version::parse(cuda).unwrap();
        f(
            &r,
            &Context {
                driver: Some(&d),
                driver_text: Some(driver),
                cuda: Some(&c),
                gpu: g,
            },
        )
    }

    #[test]
    fn forward_compat_only_table() {
        let t = gpu(0, "tesla", Some("8.0"));
        let fwd = |req: &str, driver: &str, cuda: &str| {
            ctx_eval(req, driver, cuda, Some(&t), |r, c| {
                r.forward_compat_only(c).map(|v| v.to_string())
            })
        };
        let off = "cuda>=12.4 brand=tesla,driver>=535,driver<536";
        assert_eq!(fwd(off, "535.104.05", "12.2").as_deref(), Some("12.4"));
        // Natively met: not forward compatibility.
        assert_eq!(fwd(off, "550.54.15", "12.4"), None);
        // Not met at all.
        assert_eq!(fwd(off, "545.23.06", "12.3"), None);
        // A plain driver range asks for no CUDA.
        assert_eq!(fwd("driver>=450,driver<600", "535.104.05", "12.2"), None);
        // driver= is an upper bound too; the smallest native floor is named.
        assert_eq!(
            fwd(
                "cuda>=12.6 cuda>=12.4,arch>=7.0 driver=535.104.05",
                "535.104.05",
                "12.2"
            )
            .as_deref(),
            Some("12.4")
        );
        // A native alternative that holds wins.
        assert_eq!(
            fwd(
                "cuda>=12.0 brand=tesla,driver>=535,driver<536",
                "535.104.05",
                "12.2"
            ),
            None
        );
    }

    #[test]
    fn minor_version_table() {
        let t = gpu(0, "tesla", Some("8.0"));
        let mv = |req: &str, driver: &str, cuda: &str| {
            ctx_eval(req, driver, cuda, Some(&t), |r, c| r.minor_version(c))
        };
        let v = |s: &str| Version::parse(s).unwrap();
        assert_eq!(
            mv("cuda>=12.4", "535.104.05", "12.2"),
            MinorVersion::Admits { needs: v("12.4") }
        );
        assert_eq!(
            mv(
                "cuda>=12.4 brand=geforce,driver>=470,driver<471",
                "535.104.05",
                "12.2"
            ),
            MinorVersion::Admits { needs: v("12.4") }
        );
        assert_eq!(
            mv("cuda>=13.0", "535.104.05", "12.2"),
            MinorVersion::MajorGap { needs: v("13.0") }
        );
        // Another factor failing is not a CUDA gap.
        assert_eq!(
            mv("cuda>=12.4,arch>=9.0", "535.104.05", "12.2"),
            MinorVersion::NotCuda
        );
        assert_eq!(mv("cuda=12.4", "535.104.05", "12.2"), MinorVersion::NotCuda);
        assert_eq!(
            mv("driver>=550", "535.104.05", "12.2"),
            MinorVersion::NotCuda
        );
    }
}
