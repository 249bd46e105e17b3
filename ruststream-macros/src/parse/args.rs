//! `#[subscriber(DESCRIPTOR, options..)]`'s arguments.
//!
//! Options are read with typed keywords (`syn::custom_keyword!`, as in
//! tracing-attributes), declared once in `subscriber_options!` together
//! with the list that error messages and suggestions are built from. The
//! descriptor's constructors and methods are likewise one list each.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{
    Expr, ExprAssign, ExprCall, ExprLit, ExprMethodCall, ExprPath, ExprUnary, Ident, Lit, Token,
    UnOp, token,
};

use crate::ctxt::Ctxt;
use crate::parse::batch::{BatchArgs, batch_option};
use crate::parse::code;
use ruststream_core::{
    BackoffPolicy, BrokerError, CountOption, NameKind, check_name, check_prefetch_covers_workers,
};

/// How one option of `#[subscriber]` is written, for messages.
#[derive(Debug)]
pub(crate) struct OptionSpec {
    /// Its keyword.
    pub(crate) name: &'static str,
    /// Each way to write it.
    pub(crate) usages: &'static [&'static str],
}

/// Declares the options of `#[subscriber]` once: a `syn` keyword for each
/// (what the parser peeks for), [`OPTIONS`] (what error messages list and
/// what a misspelt option is matched against) and the `OptionName` variant
/// it is read into, with `OptionName`'s parsing, name and span, so that
/// none of them can drift apart. A unit test parses every usage listed
/// here.
macro_rules! subscriber_options {
    ($($keyword:ident => $variant:ident: $($usage:literal),+;)+) => {
        /// The keywords of `#[subscriber]`'s options.
        mod kw {
            $(syn::custom_keyword!($keyword);)+
            syn::custom_keyword!(by_key);
            syn::custom_keyword!(jitter);
        }

        /// Every option of `#[subscriber]` after the descriptor.
        pub(crate) const OPTIONS: &[OptionSpec] = &[
            $(OptionSpec { name: stringify!($keyword), usages: &[$($usage),+] },)+
        ];

        /// An option's name as written.
        enum OptionName {
            $($variant(kw::$keyword),)+
            /// `by_key` on its own: it belongs inside `workers(..)`.
            ByKey(kw::by_key),
            /// Any other word: a misspelt option, or a descriptor method.
            Other(Ident),
        }

        impl OptionName {
            fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
                $(if input.peek(kw::$keyword) {
                    return input.parse().map(Self::$variant);
                })+
                if input.peek(kw::by_key) {
                    input.parse().map(Self::ByKey)
                } else if input.peek(Ident::peek_any) {
                    input.call(Ident::parse_any).map(Self::Other)
                } else {
                    Err(input.error(format!("expected an option: {}", options_list())))
                }
            }

            /// The name as written, for messages and to find duplicates.
            fn name(&self) -> String {
                match self {
                    $(Self::$variant(_) => stringify!($keyword).to_owned(),)+
                    Self::ByKey(_) => "by_key".to_owned(),
                    Self::Other(ident) => ident.unraw().to_string(),
                }
            }

            fn span(&self) -> Span {
                match self {
                    $(Self::$variant(keyword) => keyword.span,)+
                    Self::ByKey(keyword) => keyword.span,
                    Self::Other(ident) => ident.span(),
                }
            }
        }
    };
}

subscriber_options! {
    workers => Workers: "workers(n)", "workers(n, by_key)";
    reply => Reply: "reply";
    max_deliveries => MaxDeliveries: "max_deliveries(n)";
    prefetch => Prefetch: "prefetch(n)";
    backoff => Backoff: "backoff(fixed(1s))", "backoff(exponential(100ms, 2.0, max = 5min), jitter)";
    batch => Batch: "batch(max = 500, wait = 10ms)";
}

/// What a descriptor reads, as the constructor it starts with says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `new(stream)`.
    New,
    /// `claiming(stream, min_idle)`.
    Claiming,
    /// `reclaim(stream, min_idle)`.
    Reclaim,
}

/// A constructor a stream descriptor starts with.
#[derive(Debug)]
struct Constructor {
    name: &'static str,
    /// Its parameters, as messages write them.
    params: &'static [&'static str],
    /// How to call it, for a call with the wrong arguments.
    usage: &'static str,
    /// What it reads, in a few words.
    reads: &'static str,
    mode: Mode,
}

/// Every constructor of a stream descriptor: messages, suggestions and the
/// check of a descriptor are all built from this list.
const CONSTRUCTORS: &[Constructor] = &[
    Constructor {
        name: "new",
        params: &["stream"],
        usage: "the stream name: `RedisStream::new(\"orders\")`",
        reads: "new entries",
        mode: Mode::New,
    },
    Constructor {
        name: "claiming",
        params: &["stream", "min_idle"],
        usage: "the stream name and `min_idle`: `RedisStream::claiming(\"orders\", Duration::from_secs(30))`",
        reads: "idle pending entries, then new ones",
        mode: Mode::Claiming,
    },
    Constructor {
        name: "reclaim",
        params: &["stream", "min_idle"],
        usage: "the stream name and `min_idle`: `RedisStream::reclaim(\"orders\", Duration::from_secs(30))`",
        reads: "idle pending entries only",
        mode: Mode::Reclaim,
    },
];

/// The types a descriptor's constructor is called on.
const DESCRIPTOR_TYPES: &[&str] = &["RedisStream", "Stream"];

/// The builder methods a descriptor may call, each at most once.
const DESCRIPTOR_METHODS: &[&str] = &["group", "consumer", "start_id", "start_at"];

/// What a descriptor looks like, for error messages.
const DESCRIPTOR_EXAMPLE: &str = "RedisStream::new(\"orders\").group(\"billing\")";

/// `a`, `a or b`, `a, b or c`.
pub(super) fn or_list(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Every way to write an option: "`workers(n)`, .. or `prefetch(n)`".
pub(super) fn options_list() -> String {
    or_list(
        OPTIONS
            .iter()
            .flat_map(|option| option.usages)
            .map(|usage| format!("`{usage}`")),
    )
}

/// "`RedisStream::new(..)`, `RedisStream::claiming(..)` or `RedisStream::reclaim(..)`".
pub(super) fn constructors_list() -> String {
    or_list(
        CONSTRUCTORS
            .iter()
            .map(|c| format!("`RedisStream::{}(..)`", c.name)),
    )
}

/// The arguments of `#[subscriber(DESCRIPTOR, options..)]`.
#[derive(Debug)]
pub(crate) struct SubscriberArgs {
    pub(crate) descriptor: Descriptor,
    pub(crate) workers: Option<Workers>,
    /// The `reply` keyword, if given.
    pub(crate) reply: Option<kw::reply>,
    pub(crate) max_deliveries: Option<Count>,
    pub(crate) prefetch: Option<Count>,
    /// `backoff(..)`, checked: its arguments are all literals.
    pub(crate) backoff: Option<BackoffPolicy>,
    /// `batch(max = n, wait = d)`, checked: its arguments are literals.
    pub(crate) batch: Option<BatchArgs>,
    /// Whether `batch` was given, even with mistakes: the handler is then
    /// checked as a batch handler.
    pub(crate) batched: bool,
}

/// The stream descriptor, and what it reads when that can be told from
/// its tokens.
#[derive(Debug)]
pub(crate) struct Descriptor {
    /// Emitted as written: it is evaluated when the app starts.
    pub(crate) expr: Expr,
    /// What it reads; `None` if it was not recognised (an error then).
    pub(crate) reads: Option<Reads>,
}

/// What a descriptor reads, from its constructor and methods: for the
/// subscriber's generated doc line.
#[derive(Debug)]
pub(crate) struct Reads {
    pub(crate) mode: Mode,
    /// The stream name argument.
    pub(crate) stream: Option<Expr>,
    /// The `min_idle` argument of `claiming` and `reclaim`.
    pub(crate) min_idle: Option<Expr>,
    /// The argument of `.group(..)`.
    pub(crate) group: Option<Expr>,
}

/// `workers(n)` or `workers(n, by_key)`.
#[derive(Debug)]
pub(crate) struct Workers {
    pub(crate) count: Count,
    pub(crate) by_key: bool,
}

/// A count option's argument: a literal (checked here) or any expression
/// (checked by the runtime when the app starts).
#[derive(Debug)]
pub(crate) struct Count {
    pub(crate) expr: Expr,
    /// The value, when `expr` is an integer literal.
    pub(crate) literal: Option<u64>,
}

/// An option's parenthesised arguments.
pub(super) type OptionArgs = (token::Paren, Punctuated<Expr, Token![,]>);

/// One option as written: a name, and its arguments if it has parentheses.
struct RawOption {
    name: OptionName,
    args: Option<OptionArgs>,
}

/// Reads `#[subscriber]`'s arguments, recording every error in `cx`.
/// `None` if they could not be read (the errors say why).
pub(crate) fn subscriber_args(cx: &Ctxt, tokens: TokenStream) -> Option<SubscriberArgs> {
    // A syntax error stops the reading; the errors found before it are
    // reported with it.
    let parser = |input: ParseStream<'_>| parse_subscriber_args(cx, input);
    match parser.parse2(tokens) {
        Ok(args) => args,
        Err(error) => {
            cx.syn_error(error);
            None
        }
    }
}

/// `None`: the rest was not read after an error that would make it
/// misleading.
fn parse_subscriber_args(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<SubscriberArgs>> {
    if input.is_empty() {
        cx.error_at(
            Span::call_site(),
            format!(
                "`#[subscriber]` needs a stream descriptor, e.g. `#[subscriber({DESCRIPTOR_EXAMPLE}, workers(4))]`"
            ),
        );
        return Ok(None);
    }
    let expr: Expr = input.parse()?;
    let Ok(reads) = check_descriptor(cx, &expr) else {
        // What follows is probably the descriptor, which would only add
        // confusing errors: it is skipped unread.
        input.parse::<TokenStream>()?;
        return Ok(None);
    };

    let mut options = Vec::new();
    while !input.is_empty() {
        input.parse::<Token![,]>()?;
        if input.is_empty() {
            break;
        }
        options.push(parse_option(cx, input)?);
    }

    let mut args = SubscriberArgs {
        descriptor: Descriptor { expr, reads },
        workers: None,
        reply: None,
        max_deliveries: None,
        prefetch: None,
        backoff: None,
        batch: None,
        batched: false,
    };
    let mut seen: Vec<String> = Vec::new();
    for option in options {
        let name = option.name.name();
        if seen.contains(&name) {
            cx.error_at(
                option.name.span(),
                format!("duplicate option `{name}`: give each option once"),
            );
            continue;
        }
        seen.push(name);
        args.apply(cx, option);
    }
    args.check_conflicts(cx);
    Ok(Some(args))
}

fn parse_option(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<RawOption> {
    let name = OptionName::parse(input)?;
    let args = if input.peek(token::Paren) {
        let content;
        let paren = syn::parenthesized!(content in input);
        Some((paren, content.parse_terminated(Expr::parse, Token![,])?))
    } else if input.peek(Token![=]) {
        let eq: Token![=] = input.parse()?;
        let value: Expr = input.parse()?;
        let written = name.name();
        let ident = Ident::new(&written, name.span());
        cx.error_spanned_by(
            quote::quote!(#ident #eq #value),
            format!(
                "write options as calls: `{written}({})`",
                value.to_token_stream()
            ),
        );
        None
    } else {
        None
    };
    Ok(RawOption { name, args })
}

impl SubscriberArgs {
    fn apply(&mut self, cx: &Ctxt, option: RawOption) {
        let RawOption { name, args } = option;
        match name {
            OptionName::Workers(keyword) => {
                self.workers = workers(cx, keyword.span, args);
            }
            OptionName::Reply(keyword) => {
                if let Some((paren, _)) = args {
                    cx.error_at(
                        paren.span.join(),
                        "`reply` takes no arguments: the reply goes to the stream of the returned type's `#[outgoing(name = ..)]`",
                    );
                }
                self.reply = Some(keyword);
            }
            OptionName::MaxDeliveries(keyword) => {
                let Some(count) = single_count(cx, CountOption::MaxDeliveries, keyword.span, args)
                else {
                    return;
                };
                if count.literal.is_some_and(|n| n > u64::from(u32::MAX)) {
                    cx.error_spanned_by(&count.expr, "`max_deliveries` must fit in a `u32`");
                }
                self.max_deliveries = Some(count);
            }
            OptionName::Prefetch(keyword) => {
                self.prefetch = single_count(cx, CountOption::Prefetch, keyword.span, args);
            }
            OptionName::Backoff(keyword) => {
                self.backoff = backoff(cx, keyword.span, args);
            }
            OptionName::Batch(keyword) => {
                self.batched = true;
                self.batch = batch_option(cx, keyword.span, args);
            }
            OptionName::ByKey(keyword) => cx.error_at(
                keyword.span,
                "`by_key` goes inside `workers`: `workers(8, by_key)`",
            ),
            OptionName::Other(ident) => {
                let name = ident.unraw().to_string();
                let message = if DESCRIPTOR_METHODS.contains(&name.as_str()) {
                    format!(
                        "`{name}` is a method of the stream descriptor: `RedisStream::new(\"orders\").{name}(..)`"
                    )
                } else if let Some(close) =
                    did_you_mean(&name, OPTIONS.iter().map(|option| option.name))
                {
                    format!("unknown option `{name}`: did you mean `{close}`?")
                } else {
                    format!("unknown option `{name}`; expected {}", options_list())
                };
                cx.error_spanned_by(&ident, message);
            }
        }
    }

    fn check_conflicts(&self, cx: &Ctxt) {
        let workers = self.workers.as_ref().and_then(|w| w.count.literal);
        let prefetch = self
            .prefetch
            .as_ref()
            .and_then(|p| p.literal.map(|n| (n, &p.expr)));
        if let (Some(workers), Some((prefetch, expr))) = (workers, prefetch)
            && let Err(message) = check_prefetch_covers_workers(prefetch, workers)
        {
            cx.error_spanned_by(expr, message);
        }
        if let Some(batch) = &self.batch {
            batch.check_conflicts(cx, self);
        }
    }
}

/// `workers(n)` or `workers(n, by_key)`.
fn workers(cx: &Ctxt, span: Span, args: Option<OptionArgs>) -> Option<Workers> {
    let args = expect_args(
        cx,
        "workers",
        span,
        args,
        "workers(8)` or `workers(8, by_key)",
    )?;
    let (count, by_key) = with_flag::<kw::by_key, _>(
        cx,
        args,
        |n| count(cx, CountOption::Workers, n),
        "expected `by_key`: `workers(n, by_key)` keeps entries with the same partition key on one lane",
        "`workers` takes at most two arguments: `workers(n)` or `workers(n, by_key)`",
    );
    Some(Workers {
        count: count?,
        by_key,
    })
}

/// An option's arguments `(first)` or `(first, FLAG)`, `FLAG` the keyword
/// `K` (`by_key`, `jitter`): `first` read by `read`, and whether the flag
/// is there. A second argument other than `K` is an error (`expected` says
/// what may stand there), and so is a third (`at_most`).
fn with_flag<K: Parse, T>(
    cx: &Ctxt,
    args: Punctuated<Expr, Token![,]>,
    read: impl FnOnce(Expr) -> T,
    expected: &str,
    at_most: &str,
) -> (Option<T>, bool) {
    let mut args = args.into_iter();
    let first = args.next().map(read);
    let flag = match args.next() {
        None => false,
        Some(Expr::Path(path)) if syn::parse2::<K>(path.to_token_stream()).is_ok() => true,
        Some(other) => {
            cx.error_spanned_by(&other, expected);
            false
        }
    };
    if let Some(extra) = args.next() {
        cx.error_spanned_by(&extra, at_most);
    }
    (first, flag)
}

/// How `backoff` is written, for messages.
const BACKOFF_EXAMPLE: &str =
    "backoff(exponential(100ms, 2.0, max = 5min), jitter)` or `backoff(fixed(1s))";

/// The policies `backoff(..)` takes, each with how it is written.
const BACKOFF_POLICIES: &[(&str, &str)] = &[
    ("fixed", "fixed(1s)"),
    ("exponential", "exponential(100ms, 2.0, max = 5min)"),
];

/// `backoff(POLICY)` or `backoff(POLICY, jitter)`. The arguments are
/// literals, so the whole policy is checked here, against the rules of
/// the core's `BackoffPolicy`, each error on the argument that breaks one.
fn backoff(cx: &Ctxt, span: Span, args: Option<OptionArgs>) -> Option<BackoffPolicy> {
    let args = expect_args(cx, "backoff", span, args, BACKOFF_EXAMPLE)?;
    let (policy, jitter) = with_flag::<kw::jitter, _>(
        cx,
        args,
        |policy| backoff_policy(cx, &policy),
        "expected `jitter`: `backoff(fixed(1s), jitter)` draws each delay uniformly from [delay/2, delay]",
        "`backoff` takes at most two arguments: a policy and `jitter`",
    );
    let policy = policy.flatten()?;
    Some(if jitter { policy.with_jitter() } else { policy })
}

/// `fixed(d)` or `exponential(base, factor, max = d)`.
fn backoff_policy(cx: &Ctxt, expr: &Expr) -> Option<BackoffPolicy> {
    let policies = || {
        or_list(
            BACKOFF_POLICIES
                .iter()
                .map(|(_, usage)| format!("`{usage}`")),
        )
    };
    let (name, call) = match expr {
        Expr::Call(call) => match &*call.func {
            Expr::Path(path) if path.path.get_ident().is_some() => (&*call.func, Some(call)),
            other => (other, None),
        },
        Expr::Path(path) if path.path.get_ident().is_some() => (expr, None),
        other => {
            cx.error_spanned_by(other, format!("expected a backoff policy: {}", policies()));
            return None;
        }
    };
    let written = match name {
        Expr::Path(path) => path.path.get_ident().map(|ident| ident.unraw().to_string()),
        _ => None,
    };
    let Some(written) = written else {
        cx.error_spanned_by(name, format!("expected a backoff policy: {}", policies()));
        return None;
    };
    let Some(&(policy, usage)) = BACKOFF_POLICIES.iter().find(|(p, _)| *p == written) else {
        let message =
            match did_you_mean(&written, BACKOFF_POLICIES.iter().map(|(policy, _)| *policy)) {
                Some(close) => {
                    format!("unknown backoff policy `{written}`: did you mean `{close}`?")
                }
                None => format!(
                    "unknown backoff policy `{written}`; expected {}",
                    policies()
                ),
            };
        cx.error_spanned_by(name, message);
        return None;
    };
    let Some(call) = call else {
        cx.error_spanned_by(name, format!("`{policy}` needs arguments: `{usage}`"));
        return None;
    };
    if policy == "fixed" {
        fixed(cx, call, usage)
    } else {
        exponential(cx, call, usage)
    }
}

/// `fixed(d)`.
fn fixed(cx: &Ctxt, call: &ExprCall, usage: &str) -> Option<BackoffPolicy> {
    let mut args = call.args.iter();
    let Some(delay) = args.next() else {
        cx.error_at(
            call.paren_token.span.join(),
            format!("`fixed` needs the delay: `{usage}`"),
        );
        return None;
    };
    if let Some(extra) = args.next() {
        cx.error_spanned_by(extra, format!("`fixed` takes one delay: `{usage}`"));
    }
    let delay = duration(cx, "the delay", delay)?;
    checked(cx, call, BackoffPolicy::fixed(delay))
}

/// `exponential(base, factor, max = d)`: the base and the factor by
/// position, the cap by name (three bare numbers would not say which is
/// which).
fn exponential(cx: &Ctxt, call: &ExprCall, usage: &str) -> Option<BackoffPolicy> {
    let mut positional = Vec::new();
    let mut max = None;
    for arg in &call.args {
        match arg {
            Expr::Assign(ExprAssign { left, right, .. }) => {
                let named = match &**left {
                    Expr::Path(path) => path.path.get_ident().map(|i| i.unraw().to_string()),
                    _ => None,
                };
                if named.as_deref() == Some("max") && max.is_none() {
                    max = Some(&**right);
                } else if named.as_deref() == Some("max") {
                    cx.error_spanned_by(left, "`max` is given twice: give it once");
                } else {
                    cx.error_spanned_by(
                        left,
                        format!("`exponential` takes one named argument, `max`: `{usage}`"),
                    );
                }
            }
            other if max.is_some() => {
                cx.error_spanned_by(other, format!("`max = ..` comes last: `{usage}`"));
            }
            other => positional.push(other),
        }
    }
    let mut positional = positional.into_iter();
    let base = positional.next();
    let factor = positional.next();
    let extra = positional.next();
    if let Some(extra) = extra {
        let message = if max.is_none() {
            // Most likely the cap, written without its name.
            format!("name the cap: `max = {}`", code(extra))
        } else {
            format!("`exponential` takes a base delay, a factor and `max = ..`: `{usage}`")
        };
        cx.error_spanned_by(extra, message);
    }
    let missing: Vec<&str> = [
        base.is_none().then_some("the base delay"),
        factor.is_none().then_some("the factor"),
        (max.is_none() && extra.is_none()).then_some("the cap `max = ..`"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !missing.is_empty() {
        cx.error_at(
            call.paren_token.span.join(),
            format!(
                "`exponential` needs {}: `{usage}`",
                or_list(missing.iter().map(|m| (*m).to_owned())).replace(" or ", " and ")
            ),
        );
    }
    let base_value = base.and_then(|base| duration(cx, "the base delay", base));
    let factor_value = factor.and_then(|factor| backoff_factor(cx, factor));
    let max_value = max.and_then(|max| duration(cx, "`max`", max));
    let (base_value, max_value) = (base_value?, max_value?);
    if let (Some(max), Err(message)) = (max, BackoffPolicy::check_max(base_value, max_value)) {
        cx.error_spanned_by(max, message);
        return None;
    }
    checked(
        cx,
        call,
        BackoffPolicy::exponential(base_value, factor_value?, max_value),
    )
}

/// The policy, or its error (every rule was checked on its own argument
/// first, so this reports only what those checks missed).
fn checked(
    cx: &Ctxt,
    at: &ExprCall,
    policy: Result<BackoffPolicy, String>,
) -> Option<BackoffPolicy> {
    policy
        .map_err(|message| cx.error_spanned_by(at, message))
        .ok()
}

/// A duration literal of `backoff`: a whole number with a unit (`100ms`,
/// `30s`, `5min`, `1h`), more than zero. Only literals: the policy is then
/// checked whole at compile time.
fn duration(cx: &Ctxt, what: &str, expr: &Expr) -> Option<Duration> {
    let example = "`100ms`, `30s`, `5min` or `1h`";
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            let value = match int.base10_parse::<u64>() {
                Ok(value) => value,
                Err(error) => {
                    cx.syn_error(error);
                    return None;
                }
            };
            let checked = BackoffPolicy::duration_literal(value, int.suffix())
                .and_then(|d| BackoffPolicy::check_delay(what, d).map(|()| d));
            checked
                .map_err(|message| cx.error_spanned_by(int, message))
                .ok()
        }
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) => {
            cx.error_spanned_by(
                float,
                format!("write {what} as a whole number with a unit: `1500ms` rather than `1.5s`"),
            );
            None
        }
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_), ..
        }) => {
            // The same rule as a zero delay: a negative one is no delay.
            if let Err(message) = BackoffPolicy::check_delay(what, Duration::ZERO) {
                cx.error_spanned_by(expr, message);
            }
            None
        }
        other => {
            cx.error_spanned_by(
                other,
                format!("write {what} as a literal with a unit: {example}"),
            );
            None
        }
    }
}

/// The factor of `exponential`: a number literal of at least 1.
fn backoff_factor(cx: &Ctxt, expr: &Expr) -> Option<f64> {
    let (value, negative) = match expr {
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr: inner,
            ..
        }) => (&**inner, true),
        other => (other, false),
    };
    let parsed = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) if float.suffix().is_empty() => float.base10_parse::<f64>(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) if int.suffix().is_empty() => int.base10_parse::<f64>(),
        _ => {
            cx.error_spanned_by(
                expr,
                "write the factor as a plain number: `2.0` doubles each delay",
            );
            return None;
        }
    };
    let factor = match parsed {
        Ok(factor) if negative => -factor,
        Ok(factor) => factor,
        Err(error) => {
            cx.syn_error(error);
            return None;
        }
    };
    BackoffPolicy::check_factor(factor)
        .map(|()| factor)
        .map_err(|message| cx.error_spanned_by(expr, message))
        .ok()
}

/// The one count argument of `max_deliveries(n)` or `prefetch(n)`.
fn single_count(
    cx: &Ctxt,
    option: CountOption,
    span: Span,
    args: Option<OptionArgs>,
) -> Option<Count> {
    let name = option.name();
    let example = format!("{name}(5)");
    let mut args = expect_args(cx, name, span, args, &example)?.into_iter();
    let first = args.next()?;
    if let Some(extra) = args.next() {
        cx.error_spanned_by(&extra, format!("`{name}` takes one argument: `{example}`"));
    }
    Some(count(cx, option, first))
}

/// The arguments of an option that needs parentheses; an error if it has none.
pub(super) fn expect_args(
    cx: &Ctxt,
    option: &str,
    span: Span,
    args: Option<OptionArgs>,
    example: &str,
) -> Option<Punctuated<Expr, Token![,]>> {
    match args {
        Some((paren, args)) if args.is_empty() => {
            cx.error_at(
                paren.span.join(),
                format!("`{option}` needs an argument: `{example}`"),
            );
            None
        }
        Some((_, args)) => Some(args),
        None => {
            cx.error_at(span, format!("`{option}` needs an argument: `{example}`"));
            None
        }
    }
}

/// A count option's argument. A literal must be a whole number of at least
/// one; any other expression is taken as is (and checked at start-up).
fn count(cx: &Ctxt, option: CountOption, expr: Expr) -> Count {
    let literal = match &expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => match int.base10_parse::<u64>() {
            // The rule lives in the core, where the app checks it again at
            // start-up for counts that are not literals.
            Ok(n) => match option.check(n) {
                Ok(()) => Some(n),
                Err(message) => {
                    cx.error_spanned_by(int, message);
                    None
                }
            },
            Err(error) => {
                cx.syn_error(error);
                None
            }
        },
        Expr::Lit(lit) => {
            cx.error_spanned_by(lit, format!("`{}` takes a whole number", option.name()));
            None
        }
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_), ..
        }) => {
            if let Err(message) = option.check(0) {
                cx.error_spanned_by(&expr, message);
            }
            None
        }
        _ => None,
    };
    Count { expr, literal }
}

/// An option where the descriptor should be: it was left out, or put after
/// the options.
struct OptionFirst;

/// Checks that `descriptor` is `RedisStream::{new,claiming,reclaim}(..)`
/// followed by builder methods, each at most once, `.group(..)` among them,
/// and returns what it reads if it is well formed (otherwise the errors
/// are recorded).
fn check_descriptor(cx: &Ctxt, descriptor: &Expr) -> Result<Option<Reads>, OptionFirst> {
    let mut methods: Vec<&ExprMethodCall> = Vec::new();
    let mut root = descriptor;
    loop {
        match root {
            Expr::MethodCall(call) => {
                methods.push(call);
                root = &call.receiver;
            }
            Expr::Paren(inner) => root = &inner.expr,
            Expr::Group(inner) => root = &inner.expr,
            _ => break,
        }
    }
    methods.reverse();

    let option_first = match root {
        Expr::Path(path) => is_option_name(path),
        Expr::Call(call) => matches!(&*call.func, Expr::Path(path) if is_option_name(path)),
        _ => false,
    };
    if option_first && methods.is_empty() {
        cx.error_spanned_by(
            root,
            format!(
                "the stream descriptor comes first, e.g. `#[subscriber({DESCRIPTOR_EXAMPLE}, workers(4))]`"
            ),
        );
        return Err(OptionFirst);
    }
    let mut reads = match root {
        Expr::Call(call) => match check_constructor(cx, call) {
            Ok(reads) => reads,
            // The methods of something that is not a descriptor would
            // only add noise.
            Err(NotADescriptor) => return Ok(None),
        },
        other => {
            cx.error_spanned_by(
                other,
                format!("expected a stream descriptor, e.g. `{DESCRIPTOR_EXAMPLE}`"),
            );
            return Ok(None);
        }
    };

    let mut seen: Vec<String> = Vec::new();
    let mut unknown = false;
    for call in &methods {
        let method = call.method.unraw().to_string();
        if !DESCRIPTOR_METHODS.contains(&method.as_str()) {
            unknown = true;
            let message = match did_you_mean(&method, DESCRIPTOR_METHODS.iter().copied()) {
                Some(close) => format!(
                    "unknown stream descriptor method `.{method}(..)`: did you mean `.{close}(..)`?"
                ),
                None => format!(
                    "unknown stream descriptor method `.{method}(..)`; expected {}",
                    or_list(DESCRIPTOR_METHODS.iter().map(|m| format!("`.{m}(..)`")))
                ),
            };
            cx.error_spanned_by(&call.method, message);
            continue;
        }
        if seen.contains(&method) {
            cx.error_spanned_by(
                &call.method,
                format!("`.{method}(..)` is given twice: give it once"),
            );
            continue;
        }
        if call.args.len() != 1 {
            cx.error_at(
                call.paren_token.span.join(),
                format!("`.{method}(..)` takes one argument"),
            );
        }
        let kind = match method.as_str() {
            "group" => Some(NameKind::Group),
            "consumer" => Some(NameKind::Consumer),
            _ => None,
        };
        if let (Some(kind), Some(arg)) = (kind, call.args.first()) {
            check_literal_name(cx, kind, arg);
        }
        if method == "group"
            && let Some(reads) = &mut reads
        {
            reads.group = call.args.first().cloned();
        }
        seen.push(method);
    }
    // After an unknown method (a misspelt `.group` most likely) a missing
    // group is not news.
    if !unknown && !seen.iter().any(|m| m == "group") {
        cx.error_spanned_by(
            descriptor,
            "the stream descriptor has no consumer group: add .group(\"name\")",
        );
    }
    Ok(reads)
}

/// Checks a name given as a string literal against the rules every broker
/// applies (the core's, which the app checks again at start-up for names
/// that are not literals).
fn check_literal_name(cx: &Ctxt, kind: NameKind, arg: &Expr) {
    if let Expr::Lit(ExprLit {
        lit: Lit::Str(name),
        ..
    }) = arg
        && let Err(error) = check_name(kind, &name.value())
    {
        let message = match error {
            BrokerError::InvalidArgument(message) => message,
            other => other.to_string(),
        };
        cx.error_spanned_by(name, message);
    }
}

/// Whether `path` names a `#[subscriber]` option (the user left out the
/// descriptor and started with an option).
fn is_option_name(path: &ExprPath) -> bool {
    path.path
        .get_ident()
        .is_some_and(|ident| OPTIONS.iter().any(|option| ident == option.name))
}

/// The root of a descriptor is not a constructor call at all.
struct NotADescriptor;

/// Checks the constructor a descriptor starts with: what it reads, or
/// `None` for an unknown constructor of a descriptor type.
fn check_constructor(cx: &Ctxt, call: &ExprCall) -> Result<Option<Reads>, NotADescriptor> {
    let expected = format!(
        "expected a stream descriptor starting with {}, e.g. `{DESCRIPTOR_EXAMPLE}`",
        constructors_list()
    );
    let Expr::Path(path) = &*call.func else {
        cx.error_spanned_by(&call.func, expected);
        return Err(NotADescriptor);
    };
    let segments: Vec<_> = path.path.segments.iter().collect();
    let [.., ty, ctor] = segments.as_slice() else {
        cx.error_spanned_by(path, expected);
        return Err(NotADescriptor);
    };
    let ty_name = ty.ident.to_string();
    if !DESCRIPTOR_TYPES.contains(&ty_name.as_str()) {
        cx.error_spanned_by(
            &ty.ident,
            format!(
                "expected `RedisStream` (or `Stream`), not `{ty_name}`: a stream descriptor starts with {}",
                constructors_list()
            ),
        );
        return Err(NotADescriptor);
    }
    let ctor_name = ctor.ident.to_string();
    let Some(constructor) = CONSTRUCTORS.iter().find(|c| c.name == ctor_name) else {
        let message = match did_you_mean(&ctor_name, CONSTRUCTORS.iter().map(|c| c.name)) {
            Some(close) => format!(
                "unknown stream descriptor constructor `{ty_name}::{ctor_name}`: did you mean `{ty_name}::{close}`?"
            ),
            None => format!(
                "unknown stream descriptor constructor `{ty_name}::{ctor_name}`; expected {}",
                or_list(CONSTRUCTORS.iter().map(|c| format!(
                    "`{}({})` ({})",
                    c.name,
                    c.params.join(", "),
                    c.reads
                )))
            ),
        };
        cx.error_spanned_by(&ctor.ident, message);
        return Ok(None);
    };
    if call.args.len() != constructor.params.len() {
        cx.error_at(
            call.paren_token.span.join(),
            format!("`{ty_name}::{ctor_name}` takes {}", constructor.usage),
        );
    }
    if let Some(stream) = call.args.first() {
        check_literal_name(cx, NameKind::Stream, stream);
    }
    let mut args = call.args.iter().cloned();
    Ok(Some(Reads {
        mode: constructor.mode,
        stream: args.next(),
        min_idle: args.next(),
        group: None,
    }))
}

/// The closest of `candidates` to a misspelt `name`, if one is close: one
/// that starts with it (`claim` for `claiming`), or else one a few edits
/// away.
pub(super) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str> + Clone,
) -> Option<&'a str> {
    if name.len() >= 3
        && let Some(prefixed) = candidates.clone().into_iter().find(|c| c.starts_with(name))
    {
        return Some(prefixed);
    }
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}
