//! `libraries`: the crate's function libraries on every master, and the removal of
//! those of versions no longer running.
//!
//! Why it exists: each crate version loads a library of its own name
//! ([`redis_rwlock::library_name`]) and nothing removes one, so the masters collect
//! a library per version that ever ran, and every function call on a server gets
//! slower with each library loaded there.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use redis_rwlock::redis::{self, RedisError, Value};
use serde::Serialize;

use crate::cli::LibrariesArgs;
use crate::failure::{Failure, code};
use crate::masters::{Masters, MastersError};
use crate::output::{self, print_json};

/// What the crate's library names start with; hex digits follow.
const PREFIX: &str = "rwlock_";

/// Whether `name` has the shape of a library of the crate: `rwlock_` and hex digits.
pub fn is_ours(name: &str) -> bool {
    name.strip_prefix(PREFIX).is_some_and(|hash| {
        !hash.is_empty() && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Lists the libraries; with `--remove-others` or `--remove`, removes (or with
/// `--dry-run` names) some of them on every master.
pub async fn run(masters: &Masters, args: LibrariesArgs) -> Result<ExitCode, Failure> {
    let own = redis_rwlock::library_name();
    let listing = Listing::read(masters, own).await?;
    let doomed = if args.remove_others {
        Some(listing.others(own, &args.keep)?)
    } else {
        Some(args.remove.clone()).filter(|names| !names.is_empty())
    };
    let removed = match doomed {
        None => None,
        Some(names) if args.dry_run => Some(names.iter().map(|n| listing.removal(n)).collect()),
        Some(names) => {
            let mut removed = Vec::with_capacity(names.len());
            for name in &names {
                removed.push(remove(masters, name).await?);
            }
            Some(removed)
        }
    };
    let view = View {
        this_version: own,
        masters: &listing.masters,
        libraries: &listing.libraries,
        dry_run: args.dry_run,
        removed,
    };
    if args.json {
        print_json(&view)?;
    } else {
        output::print(&view.text())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One library of the crate, as the masters hold it.
#[derive(Debug, Serialize)]
struct Library {
    /// `rwlock_<hash>`.
    name: String,
    /// This tool's version loads it.
    this_version: bool,
    /// How many functions it registers.
    functions: usize,
    /// Its source's size, bytes.
    code_bytes: usize,
    /// The masters that have it (`host:port`), in address order.
    masters: Vec<String>,
}

/// The crate's libraries on every master.
struct Listing {
    /// Every master, `host:port`, in address order.
    masters: Vec<String>,
    /// This tool's version's first, then by name.
    libraries: Vec<Library>,
}

/// The command that lists them: names of the crate's shape, with their code (to
/// size them).
const LIST: [&str; 5] = ["FUNCTION", "LIST", "LIBRARYNAME", "rwlock_*", "WITHCODE"];

impl Listing {
    /// `FUNCTION LIST` on every master.
    async fn read(masters: &Masters, own: &str) -> Result<Self, Failure> {
        let cannot = |err: MastersError| {
            Failure::new(code::UNAVAILABLE, "cannot list the function libraries").caused_by(err)
        };
        let replies = masters.send(&LIST).await.map_err(cannot)?;
        let mut by_name: BTreeMap<String, Library> = BTreeMap::new();
        let mut all = Vec::with_capacity(replies.len());
        for (master, reply) in replies {
            let found = reply
                .and_then(parse)
                .map_err(|err| cannot(MastersError::reply(&LIST, &master, err)))?;
            for (name, functions, code_bytes) in found.into_iter().filter(|(n, ..)| is_ours(n)) {
                by_name
                    .entry(name.clone())
                    .or_insert_with(|| Library {
                        this_version: name == own,
                        name,
                        functions,
                        code_bytes,
                        masters: Vec::new(),
                    })
                    .masters
                    .push(master.clone());
            }
            all.push(master);
        }
        let mut libraries: Vec<Library> = by_name.into_values().collect();
        // Stable: by name within each part.
        libraries.sort_by_key(|library| !library.this_version);
        Ok(Listing {
            masters: all,
            libraries,
        })
    }

    /// The library called `name`, if a master has it.
    fn find(&self, name: &str) -> Option<&Library> {
        self.libraries.iter().find(|library| library.name == name)
    }

    /// `--remove-others`: every library but `own` and `keep`. Refused (a usage error)
    /// when a `keep` is loaded nowhere (a typo would remove the library meant), or
    /// when `own` is loaded nowhere and nothing is kept: the services then likely run
    /// another version than this tool, whose library this would remove.
    fn others(&self, own: &str, keep: &[String]) -> Result<Vec<String>, Failure> {
        if let Some(missing) = keep.iter().find(|name| self.find(name).is_none()) {
            return Err(Failure::new(
                code::USAGE,
                format!(
                    "--keep {missing}: no master has this library; refusing to remove the \
                     others (is the name right? `redis-rwlock libraries` lists them)"
                ),
            ));
        }
        if keep.is_empty() && self.find(own).is_none() && !self.libraries.is_empty() {
            return Err(Failure::new(
                code::USAGE,
                format!(
                    "this tool's version's library ({own}) is loaded on no master, so the \
                     services likely run another version: name the library they use with \
                     --keep, or the ones to remove with --remove"
                ),
            ));
        }
        Ok(self
            .libraries
            .iter()
            .filter(|library| library.name != own && !keep.contains(&library.name))
            .map(|library| library.name.clone())
            .collect())
    }

    /// What removing `name` would do: the masters that have it.
    fn removal(&self, name: &str) -> Removal {
        Removal {
            name: name.to_owned(),
            masters: self
                .find(name)
                .map(|library| library.masters.clone())
                .unwrap_or_default(),
        }
    }
}

/// One master's `FUNCTION LIST` reply: each library's name, function count and code
/// size. A library is a map in RESP3 and a flat list of fields and values in RESP2.
fn parse(reply: Value) -> Result<Vec<(String, usize, usize)>, RedisError> {
    let libraries: Vec<BTreeMap<String, Value>> =
        redis::from_redis_value(reply).map_err(RedisError::from)?;
    libraries
        .into_iter()
        .map(|mut fields| {
            let mut take = |field: &str| fields.remove(field).unwrap_or(Value::Nil);
            let name: String = redis::from_redis_value(take("library_name"))?;
            let functions: Vec<Value> = redis::from_redis_value(take("functions"))?;
            let code: Vec<u8> = redis::from_redis_value(take("library_code"))?;
            Ok((name, functions.len(), code.len()))
        })
        .collect::<Result<_, redis::ParsingError>>()
        .map_err(RedisError::from)
}

/// A library removed (or, with `--dry-run`, to be removed), and from which masters.
#[derive(Debug, Serialize)]
struct Removal {
    /// `rwlock_<hash>`.
    name: String,
    /// `host:port`, in address order; empty when no master had it.
    masters: Vec<String>,
}

/// `FUNCTION DELETE name` on every master; a master without it is left out.
async fn remove(masters: &Masters, name: &str) -> Result<Removal, Failure> {
    let args = ["FUNCTION", "DELETE", name];
    let cannot = |err: MastersError| {
        Failure::new(code::UNAVAILABLE, format!("cannot remove library {name}")).caused_by(err)
    };
    let mut removed = Vec::new();
    for (master, reply) in masters.send(&args).await.map_err(cannot)? {
        match reply {
            Ok(_) => removed.push(master),
            Err(err) if is_not_found(&err) => {}
            Err(err) => return Err(cannot(MastersError::reply(&args, &master, err))),
        }
    }
    Ok(Removal {
        name: name.to_owned(),
        masters: removed,
    })
}

/// `Library not found`: that master does not have it (never loaded there, or
/// removed meanwhile).
fn is_not_found(err: &RedisError) -> bool {
    err.code() == Some("ERR") && err.detail() == Some("Library not found")
}

/// What the command prints, as JSON or as text.
#[derive(Debug, Serialize)]
struct View<'a> {
    /// The library of this tool's version.
    this_version: &'a str,
    /// Every master, `host:port`.
    masters: &'a [String],
    /// The crate's libraries before any removal.
    libraries: &'a [Library],
    /// Nothing was removed: `removed` says what would have been.
    dry_run: bool,
    /// The libraries removed, in the order removed; absent when only listing.
    #[serde(skip_serializing_if = "Option::is_none")]
    removed: Option<Vec<Removal>>,
}

const HEADERS: [&str; 5] = ["LIBRARY", "VERSION", "FUNCTIONS", "CODE", "MASTERS"];

impl View<'_> {
    fn text(&self) -> String {
        match &self.removed {
            None => self.listing(),
            Some(removed) => self.removals(removed),
        }
    }

    /// The table, then what to do about the libraries of other versions.
    fn listing(&self) -> String {
        let masters = self.masters.len();
        let mut out = String::new();
        if self.libraries.is_empty() {
            let _ = writeln!(
                out,
                "no library of redis-rwlock on {}",
                count(masters, "master")
            );
        } else {
            let rows: Vec<[String; 5]> = self
                .libraries
                .iter()
                .map(|library| {
                    [
                        library.name.clone(),
                        if library.this_version {
                            "this tool's"
                        } else {
                            "other"
                        }
                        .to_owned(),
                        library.functions.to_string(),
                        format!("{:.1} KiB", library.code_bytes as f64 / 1024.0),
                        self.where_(&library.masters),
                    ]
                })
                .collect();
            out.push_str(&output::table(HEADERS, &rows));
        }
        let has_own = self.libraries.iter().any(|library| library.this_version);
        if !has_own {
            let _ = writeln!(
                out,
                "this tool's version loads {} (at its first lock call on each master); no \
                 master has it yet",
                self.this_version
            );
        }
        let others = self.libraries.iter().filter(|l| !l.this_version).count();
        if others > 0 {
            // Without this version's library, --remove-others refuses: name them.
            let how = if has_own {
                "--remove-others"
            } else {
                "--remove LIBRARY"
            };
            let _ = writeln!(
                out,
                "{} of other versions: once no service runs them (a rolling upgrade has \
                 finished), remove them with `redis-rwlock libraries {how}` (--dry-run \
                 first; a version still running reloads its library at its next call on \
                 each master)",
                count(others, "library")
            );
        }
        out
    }

    /// A line per library removed (or to be removed).
    fn removals(&self, removed: &[Removal]) -> String {
        let mut out = String::new();
        if removed.is_empty() {
            let _ = writeln!(out, "no library to remove");
        }
        let verb = if self.dry_run {
            "would remove"
        } else {
            "removed"
        };
        for removal in removed {
            if removal.masters.is_empty() {
                let _ = writeln!(out, "{}: on no master, nothing to remove", removal.name);
                continue;
            }
            let _ = write!(
                out,
                "{verb} {} from {}",
                removal.name,
                self.where_(&removal.masters)
            );
            if removal.name == self.this_version {
                let _ = write!(
                    out,
                    " (this tool's version's: its clients load it again at their next call \
                     on each master)"
                );
            }
            let _ = writeln!(out);
        }
        out
    }

    /// `all 3 masters`, which of them (`1 of 3: host:port`), or the one server.
    fn where_(&self, masters: &[String]) -> String {
        match self.masters.len() {
            1 => masters.join(", "),
            all if masters.len() == all => format!("all {all} masters"),
            all => format!("{} of {all}: {}", masters.len(), masters.join(", ")),
        }
    }
}

/// `1 library`, `2 libraries`.
fn count(n: usize, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        (_, None) => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_names_of_the_crate_s_shape_are_ours() {
        assert!(is_ours("rwlock_0123456789ab"));
        assert!(is_ours(redis_rwlock::library_name()));
        for other in [
            "rwlock_",
            "rwlock_0123456789AB",
            "rwlock_xyz",
            "mylib",
            "rwlock0",
        ] {
            assert!(!is_ours(other), "{other}");
        }
    }

    #[test]
    fn a_list_reply_is_read_in_either_protocol() {
        let field = |name: &str| Value::BulkString(name.as_bytes().to_vec());
        let fields = vec![
            (field("library_name"), field("rwlock_000000000000")),
            (field("engine"), field("LUA")),
            (
                field("functions"),
                Value::Array(vec![Value::Nil, Value::Nil]),
            ),
            (field("library_code"), field("#!lua name=x\n")),
        ];
        let flat = fields
            .iter()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect();
        for reply in [
            Value::Array(vec![Value::Map(fields)]),
            Value::Array(vec![Value::Array(flat)]),
        ] {
            assert_eq!(
                parse(reply).unwrap(),
                [("rwlock_000000000000".to_owned(), 2, 13)]
            );
        }
    }

    fn listing(libraries: &[(&str, &[&str])]) -> Listing {
        Listing {
            masters: vec!["a:1".into(), "b:1".into()],
            libraries: libraries
                .iter()
                .map(|(name, masters)| Library {
                    name: (*name).to_owned(),
                    this_version: *name == "rwlock_00000000000a",
                    functions: 1,
                    code_bytes: 1,
                    masters: masters.iter().map(|m| (*m).to_owned()).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn others_are_all_but_this_version_s_and_the_kept() {
        let own = "rwlock_00000000000a";
        let all = listing(&[
            (own, &["a:1"]),
            ("rwlock_00000000000b", &["a:1", "b:1"]),
            ("rwlock_00000000000c", &["b:1"]),
        ]);
        assert_eq!(
            all.others(own, &[]).unwrap(),
            ["rwlock_00000000000b", "rwlock_00000000000c"]
        );
        let keep = ["rwlock_00000000000c".to_owned()];
        assert_eq!(all.others(own, &keep).unwrap(), ["rwlock_00000000000b"]);
        // A kept name that no master has is a typo until shown otherwise.
        let typo = ["rwlock_00000000000d".to_owned()];
        let refused = all.others(own, &typo).unwrap_err().report();
        assert!(refused.contains("--keep rwlock_00000000000d"), "{refused}");
    }

    #[test]
    fn without_this_version_s_library_others_need_a_keep() {
        let own = "rwlock_00000000000a";
        let theirs = listing(&[
            ("rwlock_00000000000b", &["a:1"]),
            ("rwlock_00000000000c", &["a:1"]),
        ]);
        let refused = theirs.others(own, &[]).unwrap_err().report();
        assert!(refused.contains("loaded on no master"), "{refused}");
        let keep = ["rwlock_00000000000c".to_owned()];
        assert_eq!(theirs.others(own, &keep).unwrap(), ["rwlock_00000000000b"]);
        assert!(listing(&[]).others(own, &[]).unwrap().is_empty());
    }

    #[test]
    fn counts_read_as_words() {
        assert_eq!(count(1, "library"), "1 library");
        assert_eq!(count(3, "library"), "3 libraries");
        assert_eq!(count(2, "master"), "2 masters");
    }
}
