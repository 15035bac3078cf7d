//! The scripts' contracts with their wrappers in `scripts/mod.rs`, checked without a
//! server: each header states the arguments its wrapper sends and the reply its
//! wrapper decodes; the library fits Lua's limits; the prelude leaves `KEYS` and
//! `ARGV` to `bind`; each layout is called with the right verbs.

use super::*;
use crate::backend::redis::slot::key_slot;

#[test]
fn every_key_of_a_lock_shares_one_slot() {
    let second = Duration::from_secs(1);
    let lock = Target::hash("rwlock", "inventory", (second, 3 * second));
    assert_eq!(lock.keys(), ["rwlock:{inventory}"]);
    assert_eq!(lock.channel, "rwlock:{inventory}:released");
    assert_eq!(lock.original_ms, (1000, 3000));
    assert_eq!(
        key_slot(lock.keys()[0].as_bytes()),
        key_slot(lock.channel.as_bytes())
    );

    for (read, write) in [("res:read", "res:read"), ("{res}:read", "{res}:write")] {
        let legacy = Target::legacy(read, write, (second, second));
        assert_eq!(legacy.keys()[1..], [read, write]);
        for key in legacy.keys().iter().chain([&legacy.channel]) {
            assert_eq!(key_slot(key.as_bytes()), key_slot(read.as_bytes()), "{key}");
        }
    }
    assert_eq!(
        Target::legacy("{res}:read", "{res}:write", (second, second)).keys()[0],
        "{res}:rwlock:legacy"
    );
}

/// One script's contract as the wrappers above hold it: a word of each of its
/// own arguments' descriptions in its header, in order; the arguments its
/// wrapper sends (measured); whether a reply shaped as the header states it
/// decodes as the wrapper's reply type (and one shaped otherwise does not).
struct Contract {
    file: &'static str,
    header: &'static str,
    args: &'static [&'static str],
    sent: fn(&mut Cmd),
    /// Arguments added per fenced write (the header says "three arguments").
    per_write: usize,
    decodes: fn(redis::Value) -> bool,
}

fn contracts() -> Vec<Contract> {
    fn decodes<T: FromRedisValue>(v: redis::Value) -> bool {
        redis::from_redis_value::<T>(v).is_ok()
    }
    // Static inputs, so the argument builders' closures can be stored as fns.
    static TOKEN: LazyLock<Token> = LazyLock::new(Token::random);
    const LEASE: Duration = Duration::from_secs(1);
    vec![
        Contract {
            file: "acquire_read.lua",
            header: include_str!("../../../../lua/acquire_read.lua"),
            args: &[
                "token",
                "read lease",
                "writer preference",
                "upgradable",
                "intent lifetime",
            ],
            sent: |cmd| args::acquire_read(&TOKEN, LEASE, true, false, LEASE)(cmd),
            per_write: 0,
            decodes: decodes::<reply::Acquire>,
        },
        Contract {
            file: "acquire_write.lua",
            header: include_str!("../../../../lua/acquire_write.lua"),
            args: &["token", "write lease", "intent lifetime", "upgrade"],
            sent: |cmd| args::acquire_write(&TOKEN, LEASE, LEASE, false)(cmd),
            per_write: 0,
            decodes: decodes::<reply::Acquire>,
        },
        Contract {
            file: "release.lua",
            header: include_str!("../../../../lua/release.lua"),
            args: &["token"],
            sent: |cmd| args::release(&TOKEN)(cmd),
            per_write: 0,
            decodes: decodes::<reply::Done>,
        },
        Contract {
            file: "renew.lua",
            header: include_str!("../../../../lua/renew.lua"),
            args: &["token", "lease", "'write' or 'read'"],
            sent: |cmd| args::renew(&TOKEN, LEASE, LockMode::Write)(cmd),
            per_write: 0,
            decodes: decodes::<reply::Done>,
        },
        Contract {
            file: "downgrade.lua",
            header: include_str!("../../../../lua/downgrade.lua"),
            args: &["token", "read lease", "'write' or 'upgradable'"],
            sent: |cmd| args::downgrade(&TOKEN, LEASE, Access::Write)(cmd),
            per_write: 0,
            decodes: decodes::<reply::Downgraded>,
        },
        Contract {
            file: "fenced_write.lua",
            header: include_str!("../../../../lua/fenced_write.lua"),
            args: &["token"],
            sent: |cmd| args::fenced_write(&TOKEN, &[])(cmd),
            per_write: {
                let write = Write {
                    key: "{k}:x".into(),
                    op: "set",
                    value: b"v".to_vec(),
                    expiry: None,
                };
                let mut cmd = Cmd::new();
                args::fenced_write(&TOKEN, &[write])(&mut cmd);
                cmd.args_iter().count() - 1
            },
            decodes: decodes::<reply::Fence>,
        },
        Contract {
            file: "force_release.lua",
            header: include_str!("../../../../lua/force_release.lua"),
            args: &[],
            sent: args::none,
            per_write: 0,
            decodes: decodes::<reply::Count>,
        },
        Contract {
            file: "state.lua",
            header: include_str!("../../../../lua/state.lua"),
            args: &[],
            sent: args::none,
            per_write: 0,
            decodes: decodes::<reply::State>,
        },
    ]
}

/// The leading comment block of a script, each line without its `--`.
fn header(source: &str) -> Vec<&str> {
    source
        .lines()
        .map_while(|line| line.strip_prefix("--"))
        .map(str::trim)
        .collect()
}

/// The `ARGV[n] description` lines of a header (not the `ARGV[1..3]` reference).
fn argv_lines<'a>(header: &[&'a str]) -> Vec<(usize, &'a str)> {
    header
        .iter()
        .filter_map(|line| {
            let rest = line.strip_prefix("ARGV[")?;
            let (n, text) = rest.split_once(']')?;
            Some((n.parse().ok()?, text.trim()))
        })
        .collect()
}

/// A sample reply shaped as a header's `Returns` describes it: `{a, b, ...}` an
/// array (an element naming a token is a string, `{{...}, ...}` a list of such
/// arrays, anything else an integer); no braces, an integer.
fn sample_reply(header: &[&str]) -> redis::Value {
    let text = header.join(" ");
    let returns = text.split_once("Returns ").expect("a Returns line").1;
    fn element(text: &str) -> redis::Value {
        let text = text.trim();
        if let Some(inner) = text.strip_prefix('{') {
            let inner = &inner[..closing(inner)];
            if let Some(list) = inner.strip_prefix('{') {
                // A list: one sample of its first element.
                let first = &list[..closing(list)];
                return redis::Value::Array(vec![element(&format!("{{{first}}}"))]);
            }
            return redis::Value::Array(split_top(inner).into_iter().map(element).collect());
        }
        if text.contains("token") {
            redis::Value::BulkString(b"t".to_vec())
        } else {
            redis::Value::Int(1)
        }
    }
    /// Where the brace block that `text` is inside of closes.
    fn closing(text: &str) -> usize {
        let mut depth = 0;
        for (i, c) in text.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => return i,
                '}' => depth -= 1,
                _ => {}
            }
        }
        panic!("unbalanced braces in {text}")
    }
    fn split_top(text: &str) -> Vec<&str> {
        let (mut depth, mut start, mut out) = (0, 0, Vec::new());
        for (i, c) in text.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&text[start..]);
        out
    }
    if returns.starts_with('{') {
        element(returns)
    } else {
        element("count")
    }
}

fn measured(sent: impl Fn(&mut Cmd)) -> usize {
    let mut cmd = Cmd::new();
    sent(&mut cmd);
    cmd.args_iter().count()
}

#[test]
fn headers_state_the_contracts() {
    // The common ARGV[1..3]: what eval() sends, as helpers.lua lists it.
    let prelude = header(include_str!("../../../../lua/helpers.lua"));
    let common = argv_lines(&prelude);
    let sent = measured(|cmd| common_args(cmd, "SPUBLISH", (1, 2)));
    assert_eq!(
        common.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        (1..=sent).collect::<Vec<_>>(),
        "helpers.lua's common ARGV lines vs common_args()"
    );
    for (word, (_, line)) in ["publish", "reader", "writer"].iter().zip(&common) {
        assert!(
            line.contains(word),
            "helpers.lua ARGV line {line:?}: {word}"
        );
    }

    for c in contracts() {
        let file = c.file;
        let header = header(c.header);
        assert!(
            header.iter().any(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words.join(" ") == "ARGV[1..3] common (see helpers.lua)"
            }),
            "{file}: the header refers to the common arguments"
        );
        let own = argv_lines(&header);
        let numbers: Vec<usize> = own.iter().map(|(n, _)| *n).collect();
        let sent = measured(c.sent);
        assert_eq!(
            numbers,
            (common.len() + 1..=common.len() + sent).collect::<Vec<_>>(),
            "{file}: the header's ARGV lines vs the {sent} argument(s) its wrapper sends"
        );
        assert_eq!(own.len(), c.args.len(), "{file}: the contract's arguments");
        for (word, (n, line)) in c.args.iter().zip(&own) {
            assert!(line.contains(word), "{file} ARGV[{n}] {line:?}: {word}");
        }
        match c.per_write {
            0 => {}
            3 => assert!(
                header
                    .join(" ")
                    .contains("per key to write, in order, three arguments"),
                "{file}: the header states the arguments per write"
            ),
            n => panic!("{file}: {n} arguments per write, undocumented"),
        }
        // KEYS[1] is the state hash; fenced writes add the caller's keys.
        let keys = header.iter().filter(|l| l.starts_with("KEYS[")).count();
        assert_eq!(keys, 1 + c.per_write.min(1), "{file}: KEYS lines");

        let reply = sample_reply(&header);
        assert!(
            (c.decodes)(reply.clone()),
            "{file}: the wrapper does not decode {reply:?}"
        );
        // Longer than any shape the header states (acquire_write's refusal has
        // one element more than its grant).
        let other = match reply {
            redis::Value::Array(mut items) => {
                items.extend([redis::Value::Int(1), redis::Value::Int(1)]);
                redis::Value::Array(items)
            }
            _ => redis::Value::Array(vec![redis::Value::Int(1), redis::Value::Int(1)]),
        };
        assert!(
            !(c.decodes)(other.clone()),
            "{file}: the wrapper also decodes {other:?}, not the header's shape"
        );
    }

    // The legacy layout's keys, as legacy_layout.lua lists them.
    let legacy = header(include_str!("../../../../lua/legacy_layout.lua"));
    let keys: Vec<&str> = legacy
        .iter()
        .filter_map(|l| l.strip_prefix("KEYS["))
        .collect();
    let second = Duration::from_secs(1);
    let target = Target::legacy("{r}:read", "{r}:write", (second, second));
    assert_eq!(
        keys.len(),
        target.keys().len(),
        "legacy_layout.lua's KEYS lines"
    );
}

/// Code lines of a Lua file: comments and blank lines left out.
fn code(source: &str) -> impl Iterator<Item = &str> {
    source
        .lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .filter(|line| !line.trim().is_empty())
}

#[test]
fn the_prelude_leaves_keys_and_argv_to_bind() {
    // In the library the prelude runs once, at load, where there are no KEYS
    // or ARGV; each function gets them as parameters and hands them to bind().
    let prelude = prelude(HASH_LAYOUT);
    for line in code(&prelude) {
        assert!(
            !line.contains("KEYS") && !line.contains("ARGV"),
            "the hash layout's prelude reads KEYS or ARGV itself: {line:?}"
        );
    }
    for op in Operation::ALL {
        if op.calls().is_empty() {
            assert_eq!(
                code(op.source()).next().map(str::trim),
                Some("bind(KEYS, ARGV)"),
                "{}.lua does not start with bind(KEYS, ARGV)",
                op.name()
            );
        } else {
            // It binds nothing itself: each operation it calls binds its own key.
            assert!(
                !code(op.source()).any(|line| line.contains("bind(")),
                "{}.lua binds a key itself",
                op.name()
            );
        }
    }
}

#[test]
fn the_set_scripts_header_states_its_contract() {
    let header = header(include_str!("../../../../lua/acquire_set.lua"));
    let own = argv_lines(&header);
    assert_eq!(own.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [4, 5, 6]);
    for (word, (n, line)) in ["writer preference", "read lease", "write lease"]
        .iter()
        .zip(&own)
    {
        assert!(
            line.contains(word),
            "acquire_set.lua ARGV[{n}] {line:?}: {word}"
        );
    }
    assert!(
        header
            .iter()
            .any(|line| line.starts_with("ARGV[5 + 2i], ARGV[6 + 2i]") && line.contains("mode")),
        "acquire_set.lua states the arguments per member"
    );
    assert!(header.iter().any(|line| line.starts_with("KEYS[1..n]")));
    // The wrapper: the three, then each member's mode and token.
    let (a, b) = (Token::random(), Token::random());
    let second = Duration::from_secs(1);
    let target = Target::hash("rwlock", "{t}:a", (second, second));
    let set = SetAsk {
        members: vec![
            (&target, &a, LockMode::Read),
            (&target, &b, LockMode::Write),
        ],
        read_lease: second,
        write_lease: 2 * second,
        writer_preferred: true,
    };
    let mut cmd = Cmd::new();
    args::acquire_set(&set)(&mut cmd);
    let sent: Vec<String> = cmd
        .args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(
        sent,
        ["1", "1000", "2000", "r", a.as_str(), "w", b.as_str()]
    );
    // The replies, as the header states them.
    assert!(redis::from_redis_value::<reply::Fences>(sample_reply(&header)).is_ok());
    assert_eq!(decode_set(&[1, 0, 42]), SetAcquired::Granted(vec![0, 42]));
    assert_eq!(decode_set(&[0, 2, 1500]), SetAcquired::Refused(1));
}

#[test]
fn the_library_fits_luas_limits() {
    // A function can capture at most 60 upvalues (Lua 5.1's LUAI_MAXUPVALUES):
    // at most the prelude's top-level locals.
    let prelude = prelude(HASH_LAYOUT);
    let locals: usize = code(&prelude)
        .filter_map(|line| line.strip_prefix("local "))
        .map(|declaration| match declaration.strip_prefix("function ") {
            Some(_) => 1,
            None => declaration
                .split('=')
                .next()
                .unwrap_or_default()
                .split(',')
                .count(),
        })
        .sum();
    assert!(
        locals >= 30,
        "counted {locals} top-level locals: the count is broken"
    );
    assert!(
        locals <= 60,
        "the hash layout's prelude has {locals} top-level locals, Lua allows 60 upvalues"
    );
}

#[test]
fn each_layout_calls_its_scripts_with_the_right_verbs() {
    let hash = &*HASH;
    let state = hash.get(Operation::State);
    let release = hash.get(Operation::Release);
    let function = |op: Operation| LIBRARY.function_name(op.name());
    assert_eq!(
        state.call(Via::Function),
        ("FCALL_RO", &*function(Operation::State))
    );
    assert_eq!(
        release.call(Via::Function),
        ("FCALL", &*function(Operation::Release))
    );
    // EVALSHA names a script by the SHA1 of its source, as SCRIPT LOAD would.
    let sha = |lua: &Lua| redis::Script::new(&lua.source).get_hash().to_owned();
    assert_eq!(release.call(Via::Sha), ("EVALSHA", &*sha(release)));
    assert_eq!(state.call(Via::Source), ("EVAL_RO", &*state.source));
    // The library holds every operation, with its flags.
    for op in Operation::ALL {
        let flags: Vec<String> = op.flags().iter().map(|f| format!("'{f}'")).collect();
        let registered = format!(
            "function_name='{}', callback=op_{}, flags={{{}}}}}",
            function(op),
            op.name(),
            flags.join(", ")
        );
        assert!(LIBRARY.source().contains(&registered), "{}", op.name());
        let defined = library::as_function(op.name(), op.source());
        assert!(LIBRARY.source().contains(&defined), "{}", op.name());
        // A script of its own defines what it calls, before its text.
        let script = &hash.get(op).source;
        for callee in op.calls() {
            let callee = library::as_function(callee.name(), callee.source());
            assert!(script.contains(&callee), "{}", op.name());
        }
    }
    // The legacy layout has no library.
    let legacy = LEGACY.get(Operation::State);
    assert_eq!(legacy.call(Via::Function), ("EVALSHA_RO", &*sha(legacy)));
    assert!(legacy.source.contains("legacy_layout.lua"));
}

#[test]
fn replies_decode() {
    assert_eq!(
        decode_acquired(reply::Acquire(vec![1, 42], String::new())),
        Acquired::Granted { fence: 42 }
    );
    assert_eq!(
        decode_acquired(reply::Acquire(vec![0, 1500, 0], String::new())),
        Acquired::Refused {
            holds_for: Duration::from_millis(1500),
            fence: 0,
            batch: None,
        }
    );
    assert_eq!(
        decode_acquired(reply::Acquire(vec![0, 1500, 0], "r#42".into())),
        Acquired::Refused {
            holds_for: Duration::from_millis(1500),
            fence: 0,
            batch: Some("r#42".into()),
        }
    );
    assert_eq!(
        decode_acquired(reply::Acquire(vec![0, 1500, 7], String::new())),
        Acquired::Refused {
            holds_for: Duration::from_millis(1500),
            fence: 7,
            batch: None,
        }
    );
}
