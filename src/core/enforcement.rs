//! What a check does with what it finds wrong ([`Enforcement`]), and how
//! each config key that holds one spells it. Part of the policy types
//! ([`crate::core::policy`] re-exports it); apart so the serde spellings
//! stay beside the type.

/// What a check does with what it finds wrong: refuse the container (an
/// error finding), warn (a warning, the container starts), or nothing (the
/// check is off). The one type behind every key of that meaning:
/// `kernel_image.severity`, `libraries.severity`, `health.failed`,
/// `health.degraded`, `kernel_image.on_incomplete`,
/// `libraries.on_incomplete` and `compat.missing_library`. One word per
/// level in every key: `off`, `warn`, `enforce` (the keys that cannot be
/// off take the last two). `refuse` is a deprecated spelling of `enforce`
/// the `on_incomplete` and `missing_library` keys still read
/// ([`DEPRECATED_REFUSE`]); the config loader warns about it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Enforcement {
    Off,
    #[default]
    Warn,
    Refuse,
}

/// The keys that read `refuse` as a deprecated spelling of `enforce`, as
/// `table.key`.
pub const DEPRECATED_REFUSE: [&str; 3] = [
    "kernel_image.on_incomplete",
    "libraries.on_incomplete",
    "compat.missing_library",
];

/// The spellings of [`Enforcement`] per config key, for serde's
/// `with = "..."`. A key accepts its levels' words (and the deprecated
/// `refuse` where [`DEPRECATED_REFUSE`] lists it), and a wrong one gets
/// serde's own `unknown variant` message listing the words.
pub(crate) mod spelling {
    use super::Enforcement;

    /// One key's words, in the order error messages list them.
    struct Words {
        names: &'static [&'static str],
        values: &'static [Enforcement],
        /// Reads `refuse` as `enforce` (deprecated).
        refuse_alias: bool,
    }

    /// `kernel_image.severity`: `off`, `warn`, `enforce`.
    const OFF_WARN_ENFORCE: Words = Words {
        names: &["off", "warn", "enforce"],
        values: &[Enforcement::Off, Enforcement::Warn, Enforcement::Refuse],
        refuse_alias: false,
    };
    /// `kernel_image.on_incomplete`, `libraries.on_incomplete`,
    /// `compat.missing_library`: `warn`, `enforce` (`refuse` deprecated).
    const WARN_ENFORCE: Words = Words {
        names: &["warn", "enforce"],
        values: &[Enforcement::Warn, Enforcement::Refuse],
        refuse_alias: true,
    };

    fn serialize<S: serde::Serializer>(w: &Words, v: Enforcement, s: S) -> Result<S::Ok, S::Error> {
        match w.values.iter().position(|x| *x == v) {
            Some(i) => s.serialize_str(w.names[i]),
            None => Err(serde::ser::Error::custom(format!(
                "{v:?} cannot be written here (one of {})",
                w.names.join(", ")
            ))),
        }
    }

    fn deserialize<'de, D: serde::Deserializer<'de>>(
        w: &'static Words,
        d: D,
    ) -> Result<Enforcement, D::Error> {
        #[derive(Clone, Copy)]
        struct V(&'static Words);
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Enforcement;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                let quoted: Vec<String> = self.0.names.iter().map(|n| format!("`{n}`")).collect();
                write!(f, "one of {}", quoted.join(", "))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Enforcement, E> {
                match self.0.names.iter().position(|n| *n == v) {
                    Some(i) => Ok(self.0.values[i]),
                    None if self.0.refuse_alias && v == "refuse" => Ok(Enforcement::Refuse),
                    None => Err(E::unknown_variant(v, self.0.names)),
                }
            }
            // serde's derived enums also read the externally tagged form
            // `{ enforce = {} }`; a file that wrote it still parses.
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Enforcement, A::Error> {
                use serde::de::{Error, IgnoredAny};
                let Some(name) = map.next_key::<String>()? else {
                    return Err(A::Error::invalid_length(0, &self));
                };
                let value = self.visit_str::<A::Error>(&name)?;
                let body: std::collections::BTreeMap<String, IgnoredAny> = map.next_value()?;
                if !body.is_empty() || map.next_key::<IgnoredAny>()?.is_some() {
                    return Err(A::Error::invalid_length(2, &self));
                }
                Ok(value)
            }
        }
        d.deserialize_any(V(w))
    }

    macro_rules! key {
        ($module:ident, $words:ident) => {
            #[doc = concat!("serde `with` for a key spelled as [`", stringify!($words), "`].")]
            pub mod $module {
                use super::super::Enforcement;
                pub fn serialize<S: serde::Serializer>(
                    v: &Enforcement,
                    s: S,
                ) -> Result<S::Ok, S::Error> {
                    super::serialize(&super::$words, *v, s)
                }
                pub fn deserialize<'de, D: serde::Deserializer<'de>>(
                    d: D,
                ) -> Result<Enforcement, D::Error> {
                    super::deserialize(&super::$words, d)
                }
            }
        };
    }
    key!(off_warn_enforce, OFF_WARN_ENFORCE);
    key!(warn_enforce, WARN_ENFORCE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::Config;

    fn parse(text: &str) -> Result<Config, String> {
        toml::from_str::<Config>(text).map_err(|e| e.message().to_string())
    }

    #[test]
    fn each_key_keeps_its_own_words() {
        /// Table, key, the field it sets, its words and what each means.
        type Case = (
            &'static str,
            &'static str,
            fn(&Config) -> Enforcement,
            &'static [(&'static str, Enforcement)],
        );
        let cases: [Case; 3] = [
            (
                "kernel_image",
                "severity",
                |c| c.kernel_image.severity,
                &[
                    ("off", Enforcement::Off),
                    ("warn", Enforcement::Warn),
                    ("enforce", Enforcement::Refuse),
                ],
            ),
            (
                "kernel_image",
                "on_incomplete",
                |c| c.kernel_image.on_incomplete,
                &[
                    ("warn", Enforcement::Warn),
                    ("enforce", Enforcement::Refuse),
                ],
            ),
            (
                "compat",
                "missing_library",
                |c| c.compat.missing_library,
                &[
                    ("warn", Enforcement::Warn),
                    ("enforce", Enforcement::Refuse),
                ],
            ),
        ];
        for (table, key, get, words) in cases {
            for (word, want) in words {
                let c = parse(&format!("[{table}]\n{key} = \"{word}\"\n")).unwrap();
                assert_eq!(get(&c), *want, "{table}.{key} = {word}");
                // The externally tagged form serde's derive also read.
                let c = parse(&format!("[{table}]\n{key} = {{ {word} = {{}} }}\n")).unwrap();
                assert_eq!(get(&c), *want, "{table}.{key} = {{ {word} = {{}} }}");
                // Written back with the same word.
                let text = toml::to_string(&c).unwrap();
                assert!(text.contains(&format!("{key} = \"{word}\"")), "{text}");
            }
            let listed: Vec<String> = words.iter().map(|(w, _)| format!("`{w}`")).collect();
            let e = parse(&format!("[{table}]\n{key} = \"loud\"\n")).unwrap_err();
            assert!(e.contains("unknown variant `loud`, expected"), "{e}");
            for w in &listed {
                assert!(e.contains(w.as_str()), "{e}");
            }
            let e = parse(&format!("[{table}]\n{key} = 1\n")).unwrap_err();
            assert!(e.contains("invalid type: integer `1`"), "{e}");
            assert!(parse(&format!("[{table}]\n{key} = {{ warn = 1 }}\n")).is_err());
            assert!(parse(&format!("[{table}]\n{key} = {{}}\n")).is_err());
        }
        // A level a key does not have is refused; `refuse` is read only
        // where it was a spelling, and written back as `enforce`.
        assert!(parse("[kernel_image]\nseverity = \"refuse\"\n").is_err());
        assert!(parse("[kernel_image]\non_incomplete = \"off\"\n").is_err());
        assert!(parse("[health]\nfailed = \"refuse\"\n").is_err());
        for key in DEPRECATED_REFUSE {
            let (table, key) = key.split_once('.').unwrap();
            let c = parse(&format!("[{table}]\n{key} = \"refuse\"\n")).unwrap();
            let text = toml::to_string(&c).unwrap();
            assert!(text.contains(&format!("{key} = \"enforce\"")), "{text}");
        }
    }

    #[test]
    fn exact_messages_for_a_wrong_word() {
        let e = parse("[kernel_image]\nseverity = \"loud\"\n").unwrap_err();
        assert_eq!(
            e,
            "unknown variant `loud`, expected one of `off`, `warn`, `enforce`"
        );
        let e = parse("[kernel_image]\non_incomplete = \"off\"\n").unwrap_err();
        assert_eq!(e, "unknown variant `off`, expected `warn` or `enforce`");
        let e = parse("[compat]\nmissing_library = \"off\"\n").unwrap_err();
        assert_eq!(e, "unknown variant `off`, expected `warn` or `enforce`");
    }
}
