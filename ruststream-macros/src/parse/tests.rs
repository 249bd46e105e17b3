//! Unit tests of the parsing and checking in `parse.rs`.

use super::args::*;
use super::handler::*;
use super::*;

/// The arguments read from `tokens`, and every error, through one context
/// as an expansion does.
fn read(tokens: TokenStream) -> (Option<SubscriberArgs>, Vec<String>) {
    let cx = Ctxt::new();
    let args = subscriber_args(&cx, tokens);
    let errors = match cx.check() {
        Ok(()) => Vec::new(),
        Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
    };
    (args, errors)
}

fn errors_of(tokens: TokenStream) -> Vec<String> {
    read(tokens).1
}

/// Arguments that must read without errors.
fn args_of(tokens: TokenStream) -> SubscriberArgs {
    let (args, errors) = read(tokens.clone());
    assert!(errors.is_empty(), "{tokens}: {errors:?}");
    args.expect("arguments")
}

#[test]
fn reads_every_option() {
    let args = args_of(quote::quote!(
        RedisStream::claiming("payments", MIN_IDLE)
            .group("ledger")
            .consumer("c1"),
        workers(8, by_key),
        reply,
        max_deliveries(5),
        prefetch(16),
    ));
    let workers = args.workers.expect("workers");
    assert_eq!(workers.count.literal, Some(8));
    assert!(workers.by_key);
    assert!(args.reply.is_some());
    assert_eq!(args.max_deliveries.and_then(|m| m.literal), Some(5));
    assert_eq!(args.prefetch.and_then(|p| p.literal), Some(16));
}

#[test]
fn counts_can_be_expressions() {
    let args = args_of(quote::quote!(
        Stream::new("s").group("g"),
        workers(WORKERS),
        prefetch(WORKERS * 2)
    ));
    assert_eq!(args.workers.expect("workers").count.literal, None);
    assert_eq!(args.prefetch.expect("prefetch").literal, None);
}

#[test]
fn accepts_qualified_descriptors() {
    assert!(
        errors_of(quote::quote!(
            ruststream::RedisStream::reclaim("s", D).group("g")
        ))
        .is_empty()
    );
    assert!(
        errors_of(quote::quote!(
            (Stream::new("s").group("g")).start_at(StreamStart::Beginning)
        ))
        .is_empty()
    );
}

#[test]
fn reports_every_error_at_once() {
    let errors = errors_of(quote::quote!(
        RedisStream::new("s").groop("g"),
        workers(0),
        wrkers(2),
        reply,
        reply
    ));
    assert_eq!(
        errors,
        [
            "unknown stream descriptor method `.groop(..)`: did you mean `.group(..)`?",
            "`workers` must be at least 1: it is how many handlers run at once",
            "unknown option `wrkers`: did you mean `workers`?",
            "duplicate option `reply`: give each option once",
        ]
    );
}

#[test]
fn descriptor_errors() {
    let cases: &[(TokenStream, &str)] = &[
        (
            quote::quote!(RedisStream::create("s").group("g")),
            "unknown stream descriptor constructor `RedisStream::create`",
        ),
        (
            quote::quote!(Queue::new("s").group("g")),
            "expected `RedisStream` (or `Stream`)",
        ),
        (
            quote::quote!(RedisStream::claiming("s").group("g")),
            "`RedisStream::claiming` takes the stream name and `min_idle`",
        ),
        (
            quote::quote!(RedisStream::new("s").group("a").group("b")),
            "`.group(..)` is given twice",
        ),
        (
            quote::quote!(RedisStream::new("s").consumer("c")),
            "the stream descriptor has no consumer group: add .group(\"name\")",
        ),
        (
            quote::quote!(RedisStream::claim("s", D).group("g")),
            "did you mean `RedisStream::claiming`?",
        ),
        (quote::quote!(LEDGER), "expected a stream descriptor"),
        (
            quote::quote!(workers(4), RedisStream::new("s").group("g")),
            "the stream descriptor comes first",
        ),
        (
            quote::quote!(workers(4)),
            "the stream descriptor comes first",
        ),
        (quote::quote!(), "needs a stream descriptor"),
    ];
    for (input, expected) in cases {
        let errors = errors_of(input.clone());
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{input}: {errors:?} lacks {expected:?}"
        );
    }
    // The descriptor after the options is not read, nor reported again.
    assert_eq!(
        errors_of(quote::quote!(workers(4), RedisStream::new("s").group("g"))).len(),
        1
    );
}

#[test]
fn option_errors() {
    let d = quote::quote!(RedisStream::new("s").group("g"));
    let cases: &[(TokenStream, &str)] = &[
        (quote::quote!(workers(2, by_lane)), "expected `by_key`"),
        (quote::quote!(workers), "`workers` needs an argument"),
        (quote::quote!(workers()), "`workers` needs an argument"),
        (
            quote::quote!(workers = 3),
            "write options as calls: `workers(3)`",
        ),
        (
            quote::quote!(max_deliveries(0)),
            "`max_deliveries` must be at least 1",
        ),
        (
            quote::quote!(max_deliveries(5_000_000_000)),
            "must fit in a `u32`",
        ),
        (quote::quote!(prefetch(-1)), "`prefetch` must be at least 1"),
        (
            quote::quote!(prefetch("8")),
            "`prefetch` takes a whole number",
        ),
        (
            quote::quote!(workers(8), prefetch(4)),
            "`prefetch(4)` is less than `workers(8)`",
        ),
        (quote::quote!(reply(Screened)), "`reply` takes no arguments"),
        (quote::quote!(by_key), "`by_key` goes inside `workers`"),
        (
            quote::quote!(group("g")),
            "`group` is a method of the stream descriptor",
        ),
        (
            quote::quote!(retries(3)),
            "unknown option `retries`; expected",
        ),
        (quote::quote!(8), "expected an option"),
    ];
    for (option, expected) in cases {
        let errors = errors_of(quote::quote!(#d, #option));
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{option}: {errors:?} lacks {expected:?}"
        );
    }
}

fn handler_errors(function: TokenStream, reply: bool) -> (Option<Handler>, Vec<String>) {
    let function: ItemFn = syn::parse2(function).expect("a function");
    let cx = Ctxt::new();
    let handler = Handler::from_fn(&cx, &function, Some(reply), false);
    let errors = match cx.check() {
        Ok(()) => Vec::new(),
        Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
    };
    (handler, errors)
}

#[test]
fn classifies_payloads() {
    /// Whether a payload is of the expected kind.
    type IsKind = fn(&Payload) -> bool;
    let cases: &[(TokenStream, IsKind, bool)] = &[
        (
            quote::quote!(
                async fn f(p: &Payment) {}
            ),
            |p| matches!(p, Payload::Borrowed(_)),
            false,
        ),
        (
            quote::quote!(
                async fn f(p: Payment, ctx: &mut Context<'_>) {}
            ),
            |p| matches!(p, Payload::Owned(_)),
            true,
        ),
        (
            quote::quote!(
                async fn f(p: &[u8], ctx: &mut ruststream::Context<'_>) {}
            ),
            |p| matches!(p, Payload::RawSlice),
            true,
        ),
        (
            quote::quote!(
                async fn f(p: Vec<u8>) {}
            ),
            |p| matches!(p, Payload::RawVec),
            false,
        ),
        (
            quote::quote!(
                async fn f(p: Vec<Payment>) {}
            ),
            |p| matches!(p, Payload::Owned(_)),
            false,
        ),
        // Owned types with `'static` lifetimes decode into owned values.
        (
            quote::quote!(
                async fn f(p: std::borrow::Cow<'static, str>) {}
            ),
            |p| matches!(p, Payload::Owned(_)),
            false,
        ),
        (
            quote::quote!(
                async fn f(p: &'_ [u8; 4]) {}
            ),
            |p| matches!(p, Payload::Borrowed(_)),
            false,
        ),
        // Elided lifetimes are not rejected: a type whose fields are
        // `Cow<'a, str>` decodes into owned values for any `'a`.
        (
            quote::quote!(
                async fn f(p: &Note<'_>) {}
            ),
            |p| matches!(p, Payload::Borrowed(_)),
            false,
        ),
        (
            quote::quote!(
                async fn f(p: Cow<'_, str>) {}
            ),
            |p| matches!(p, Payload::Owned(_)),
            false,
        ),
    ];
    for (function, is_kind, context) in cases {
        let (handler, errors) = handler_errors(function.clone(), false);
        assert!(errors.is_empty(), "{function}: {errors:?}");
        let handler = handler.expect("a handler");
        assert!(
            is_kind(&handler.payload),
            "{function}: {:?}",
            handler.payload
        );
        assert_eq!(handler.context, *context, "{function}");
    }
}

#[test]
fn signature_errors() {
    let cases: &[(TokenStream, bool, &str)] = &[
        (
            quote::quote!(
                fn f(p: &P) {}
            ),
            false,
            "a subscriber must be an `async fn`",
        ),
        (
            quote::quote!(
                async fn f<T>(p: &T) {}
            ),
            false,
            "a subscriber cannot be generic",
        ),
        (
            quote::quote!(
                async fn f(&self, p: &P) {}
            ),
            false,
            "`#[subscriber]` goes on a free function, not a method: move `f` out of the `impl` block",
        ),
        (
            quote::quote!(
                async fn f() {}
            ),
            false,
            "a subscriber takes the payload as its first parameter",
        ),
        (
            quote::quote!(
                async fn f(p: &P, q: &Q) {}
            ),
            false,
            "the second parameter of a subscriber can only be the context",
        ),
        (
            quote::quote!(
                async fn f(p: &P, c: &mut Context<'_>, q: Q) {}
            ),
            false,
            "too many parameters",
        ),
        (
            quote::quote!(
                async fn f(c: &mut Context<'_>, p: &P) {}
            ),
            false,
            "the payload comes first",
        ),
        (
            quote::quote!(
                async fn f(p: &P, c: &Context<'_>) {}
            ),
            false,
            "take the context as `&mut Context<'_>`",
        ),
        (
            quote::quote!(
                async fn f(p: &mut P) {}
            ),
            false,
            "the payload cannot be borrowed mutably",
        ),
        (
            quote::quote!(
                async fn f(p: &str) {}
            ),
            false,
            "`&str` is not a payload type",
        ),
        (
            quote::quote!(
                async fn f(p: impl Any) {}
            ),
            false,
            "the payload needs a concrete type",
        ),
        (
            quote::quote!(
                async fn f(p: &P) {}
            ),
            true,
            "a `reply` subscriber returns the value to publish",
        ),
        (
            quote::quote!(
                async unsafe fn f(p: &P) {}
            ),
            false,
            "a subscriber cannot be `unsafe`",
        ),
        (
            quote::quote!(
                async fn f(p: &[Payment]) {}
            ),
            false,
            "a payload cannot be a slice: take `Vec<Payment>`",
        ),
        (
            quote::quote!(
                async fn f(p: &'static str) {}
            ),
            false,
            "`&str` is not a payload type",
        ),
        (
            quote::quote!(
                async fn f(p: &'a [Payment]) {}
            ),
            false,
            "a payload cannot be a slice: take `Vec<Payment>`",
        ),
        (
            quote::quote!(
                async fn f(p: [u64]) {}
            ),
            false,
            "a payload cannot be a slice: take `Vec<u64>`",
        ),
        (
            quote::quote!(
                async fn f(p: &'a Payment) {}
            ),
            false,
            "the payload cannot be borrowed for `'a`: payloads are decoded into owned values, lent to the handler for one call; write `&Payment`",
        ),
        (
            quote::quote!(
                async fn f<'a>(p: &'a Payment) {}
            ),
            false,
            "a subscriber takes no lifetime parameters: payloads are decoded into owned values",
        ),
        (
            quote::quote!(
                async fn f<'a>(p: Payment<'a>, ctx: &mut Context<'a>) {}
            ),
            false,
            "a subscriber takes no lifetime parameters",
        ),
        (
            quote::quote!(
                async fn f(p: Payment<'a>) {}
            ),
            false,
            "the payload type cannot borrow for `'a`: payloads are decoded into owned values",
        ),
        (
            quote::quote!(
                async fn f(p: Vec<&str>) {}
            ),
            false,
            "the payload cannot hold a reference (`&str`): payloads are decoded into owned values; use `String`",
        ),
        (
            quote::quote!(
                async fn f(p: (u64, &'static [u8])) {}
            ),
            false,
            "the payload cannot hold a reference (`&'static [u8]`): payloads are decoded into owned values; use `Vec<u8>`",
        ),
        (
            quote::quote!(
                async fn payment(payment: &Payment) {}
            ),
            false,
            "the parameter `payment` is named like its function",
        ),
        (
            quote::quote!(
                async fn pair((id, pair): (u64, u64)) {}
            ),
            false,
            "the parameter `pair` is named like its function",
        ),
        (
            quote::quote!(
                async fn f(p: &P) -> () {}
            ),
            true,
            "a `reply` subscriber returns the value to publish, not `()`",
        ),
        (
            quote::quote!(
                async fn f(p: &P) -> Option<Screened> {}
            ),
            true,
            "`reply` publishes every value the handler returns, so it cannot return `Option<..>`: to reply only sometimes, drop `reply`",
        ),
        (
            quote::quote!(
                async fn f(p: &P) -> std::io::Result<Screened> {}
            ),
            true,
            "so it cannot return `Result<..>`: to reply only on success, drop `reply`",
        ),
        (
            quote::quote!(
                async fn f(p: &P) -> HandlerOutcome {}
            ),
            true,
            "`HandlerOutcome` only settles the entry: drop `reply`",
        ),
        (
            quote::quote!(
                #[ruststream::subscriber(RedisStream::new("s").group("g"))]
                async fn f(p: &P) {}
            ),
            false,
            "`#[subscriber]` is given twice: a function is one subscriber",
        ),
    ];
    for (function, reply, expected) in cases {
        let (_, errors) = handler_errors(function.clone(), *reply);
        // One mistake, one message.
        assert_eq!(errors.len(), 1, "{function}: {errors:?}");
        assert!(
            errors[0].contains(expected),
            "{function}: {errors:?} lacks {expected:?}"
        );
    }
}

#[test]
fn outgoing_names() {
    let ok: DeriveInput = syn::parse_quote! {
        #[outgoing(name = "payments")]
        struct Payment;
    };
    let cx = Ctxt::new();
    assert_eq!(
        outgoing_name(&cx, &ok).map(|l| l.value()).as_deref(),
        Some("payments")
    );
    cx.check().expect("no error");

    let bad: DeriveInput = syn::parse_quote! {
        #[outgoing(name = "", topic = "x", name = 3)]
        #[outgoing(name = "a", name = "b")]
        struct Payment;
    };
    let cx = Ctxt::new();
    outgoing_name(&cx, &bad);
    let errors: Vec<String> = cx
        .check()
        .unwrap_err()
        .into_iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        errors,
        [
            "the stream name cannot be empty",
            "unknown key `topic` in `#[outgoing]`; expected `name = \"...\"`",
            "expected the stream name as a string literal: `name = \"payments\"`",
            "duplicate `name`: give it once",
        ]
    );
}

#[test]
fn suggestions_only_for_close_names() {
    let options = || OPTIONS.iter().map(|option| option.name);
    assert_eq!(did_you_mean("worker", options()), Some("workers"));
    assert_eq!(
        did_you_mean("max_delivery", options()),
        Some("max_deliveries")
    );
    assert_eq!(did_you_mean("timeout", options()), None);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
}

/// The list of options and the parser's keywords are declared together;
/// this checks that the parser has a branch for every option listed.
#[test]
fn every_listed_option_parses() {
    for usage in OPTIONS.iter().flat_map(|option| option.usages) {
        let option: TokenStream = usage.replace("(n", "(2").parse().expect("tokens");
        let errors = errors_of(quote::quote!(RedisStream::new("s").group("g"), #option));
        assert!(errors.is_empty(), "{usage}: {errors:?}");
    }
}

#[test]
fn messages_list_every_option_and_constructor() {
    assert_eq!(
        options_list(),
        "`workers(n)`, `workers(n, by_key)`, `reply`, `max_deliveries(n)`, `prefetch(n)`, \
         `backoff(fixed(1s))`, `backoff(exponential(100ms, 2.0, max = 5min), jitter)` or \
         `batch(max = 500, wait = 10ms)`"
    );
    assert_eq!(
        constructors_list(),
        "`RedisStream::new(..)`, `RedisStream::claiming(..)` or `RedisStream::reclaim(..)`"
    );
    assert_eq!(or_list(["a".to_owned()]), "a");
}

#[test]
fn batch_reads_max_and_wait() {
    let args = args_of(quote::quote!(
        RedisStream::new("s").group("g"),
        batch(wait = 2s, max = 64)
    ));
    let batch = args.batch.expect("batch");
    assert_eq!(batch.max, 64);
    assert_eq!(batch.wait, std::time::Duration::from_secs(2));
    assert!(args.batched);
}

#[test]
fn what_a_descriptor_reads() {
    let args = args_of(quote::quote!(
        RedisStream::claiming("payments", MIN_IDLE).group("ledger")
    ));
    let reads = args.descriptor.reads.expect("reads");
    assert_eq!(reads.mode, Mode::Claiming);
    assert_eq!(reads.stream.map(code).as_deref(), Some("\"payments\""));
    assert_eq!(reads.min_idle.map(code).as_deref(), Some("MIN_IDLE"));
    assert_eq!(reads.group.map(code).as_deref(), Some("\"ledger\""));
}

#[test]
fn code_reads_like_code() {
    assert_eq!(code(quote::quote!(Vec<u8>)), "Vec<u8>");
    assert_eq!(code(quote::quote!(&'a str)), "&'a str");
    assert_eq!(code(quote::quote!(Result<(), E>)), "Result<(), E>");
    assert_eq!(
        code(quote::quote!(Duration::from_secs(30))),
        "Duration::from_secs(30)"
    );
    assert_eq!(code(quote::quote!(&mut [u8])), "&mut [u8]");
    assert_eq!(code(quote::quote!(f(&a[1..]))), "f(&a[1..])");
}
