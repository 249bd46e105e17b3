//! The macros' inputs as typed values: `#[subscriber(..)]`'s arguments,
//! the handler's signature, `#[outgoing(..)]` and the app function.
//!
//! Everything here only reads and checks; `expand.rs` writes the code.
//! Every check records its error in a [`Ctxt`] and goes on, so one build
//! reports every mistake, each spanned on the token that is wrong.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{
    Attribute, DeriveInput, Expr, ExprCall, ExprLit, ExprMethodCall, ExprPath, ExprUnary, FnArg,
    GenericArgument, Ident, ItemFn, Lit, LitStr, PathArguments, ReturnType, Signature, Token, Type,
    TypePath, UnOp, token,
};

use crate::ctxt::Ctxt;

/// What a descriptor looks like, for error messages.
const DESCRIPTOR_EXAMPLE: &str = "`RedisStream::new(\"orders\").group(\"billing\")`";

/// The options `#[subscriber]` takes after the descriptor.
const OPTIONS: &[&str] = &["workers", "reply", "max_deliveries", "prefetch"];
const OPTIONS_LIST: &str =
    "`workers(n)`, `workers(n, by_key)`, `reply`, `max_deliveries(n)` or `prefetch(n)`";

/// The constructors a descriptor starts with, and how many arguments each takes.
const CONSTRUCTORS: &[(&str, usize, &str)] = &[
    ("new", 1, "the stream name: `RedisStream::new(\"orders\")`"),
    (
        "claiming",
        2,
        "the stream name and `min_idle`: `RedisStream::claiming(\"orders\", Duration::from_secs(30))`",
    ),
    (
        "reclaim",
        2,
        "the stream name and `min_idle`: `RedisStream::reclaim(\"orders\", Duration::from_secs(30))`",
    ),
];
const DESCRIPTOR_TYPES: &[&str] = &["RedisStream", "Stream"];

/// The builder methods a descriptor may call, each at most once.
const DESCRIPTOR_METHODS: &[&str] = &["group", "consumer", "start_id", "start_at"];

/// The arguments of `#[subscriber(DESCRIPTOR, options..)]`.
#[derive(Debug)]
pub(crate) struct SubscriberArgs {
    /// The stream descriptor, emitted as written.
    pub(crate) descriptor: Expr,
    pub(crate) workers: Option<Workers>,
    /// The `reply` word, if given.
    pub(crate) reply: Option<Ident>,
    pub(crate) max_deliveries: Option<Count>,
    pub(crate) prefetch: Option<Count>,
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

/// One option as written: a name, and its arguments if it has parentheses.
struct RawOption {
    name: Ident,
    args: Option<(token::Paren, Punctuated<Expr, Token![,]>)>,
}

impl Parse for SubscriberArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let cx = Ctxt::new();
        // A syntax error stops the reading; the errors found before it are
        // reported with it.
        let parsed = parse_subscriber_args(&cx, input);
        match (parsed, cx.check()) {
            (Ok(Some(args)), Ok(())) => Ok(args),
            (Ok(_), Err(errors)) => Err(errors),
            (Err(error), Ok(())) => Err(error),
            (Err(error), Err(mut errors)) => {
                errors.combine(error);
                Err(errors)
            }
            (Ok(None), Ok(())) => unreachable!("arguments left unread without an error"),
        }
    }
}

/// Reads the arguments, recording errors in `cx`. `Ok(None)`: the rest was
/// not read after an error that would make it misleading.
fn parse_subscriber_args(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<SubscriberArgs>> {
    if input.is_empty() {
        cx.error_at(
            Span::call_site(),
            format!(
                "`#[subscriber]` needs a stream descriptor, e.g. `#[subscriber({}, workers(4))]`",
                &DESCRIPTOR_EXAMPLE[1..DESCRIPTOR_EXAMPLE.len() - 1]
            ),
        );
        return Ok(None);
    }
    let descriptor: Expr = input.parse()?;
    if !check_descriptor(cx, &descriptor) {
        // An option where the descriptor should be: what follows is
        // probably the descriptor, which would only add confusing errors.
        return Ok(None);
    }

    let mut options = Vec::new();
    while !input.is_empty() {
        input.parse::<Token![,]>()?;
        if input.is_empty() {
            break;
        }
        options.push(parse_option(cx, input)?);
    }

    let mut args = SubscriberArgs {
        descriptor,
        workers: None,
        reply: None,
        max_deliveries: None,
        prefetch: None,
    };
    let mut seen: Vec<String> = Vec::new();
    for option in options {
        let name = option.name.unraw().to_string();
        if seen.contains(&name) {
            cx.error_spanned_by(
                &option.name,
                format!("duplicate option `{name}`: give each option once"),
            );
            continue;
        }
        seen.push(name.clone());
        args.apply(cx, &name, option);
    }
    args.check_conflicts(cx);
    Ok(Some(args))
}

fn parse_option(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<RawOption> {
    if !input.peek(Ident::peek_any) {
        return Err(input.error(format!("expected an option: {OPTIONS_LIST}")));
    }
    let name = input.call(Ident::parse_any)?;
    let args = if input.peek(token::Paren) {
        let content;
        let paren = syn::parenthesized!(content in input);
        Some((paren, content.parse_terminated(Expr::parse, Token![,])?))
    } else if input.peek(Token![=]) {
        let eq: Token![=] = input.parse()?;
        let value: Expr = input.parse()?;
        cx.error_spanned_by(
            quote::quote!(#name #eq #value),
            format!(
                "write options as calls: `{}({})`",
                name,
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
    fn apply(&mut self, cx: &Ctxt, name: &str, option: RawOption) {
        let RawOption { name: ident, args } = option;
        match name {
            "workers" => {
                let Some(args) = expect_args(cx, &ident, args, "workers(8)` or `workers(8, by_key)")
                else {
                    return;
                };
                let mut args = args.into_iter();
                let count = args.next().map(|n| count(cx, "workers", n));
                let by_key = match args.next() {
                    None => false,
                    Some(Expr::Path(p)) if p.path.is_ident("by_key") => true,
                    Some(other) => {
                        cx.error_spanned_by(
                            &other,
                            "expected `by_key`: `workers(n, by_key)` keeps entries with the same partition key on one lane",
                        );
                        false
                    }
                };
                if let Some(extra) = args.next() {
                    cx.error_spanned_by(
                        &extra,
                        "`workers` takes at most two arguments: `workers(n)` or `workers(n, by_key)`",
                    );
                }
                if let Some(count) = count {
                    self.workers = Some(Workers { count, by_key });
                }
            }
            "reply" => {
                if let Some((paren, _)) = args {
                    cx.error_at(
                        paren.span.join(),
                        "`reply` takes no arguments: the reply goes to the stream of the returned type's `#[outgoing(name = ..)]`",
                    );
                }
                self.reply = Some(ident);
            }
            "max_deliveries" | "prefetch" => {
                let example = format!("{name}(5)");
                let Some(args) = expect_args(cx, &ident, args, &example) else {
                    return;
                };
                let mut args = args.into_iter();
                let Some(first) = args.next() else { return };
                if let Some(extra) = args.next() {
                    cx.error_spanned_by(&extra, format!("`{name}` takes one argument: `{example}`"));
                }
                let count = count(cx, name, first);
                if name == "prefetch" {
                    self.prefetch = Some(count);
                } else {
                    if count.literal.is_some_and(|n| n > u64::from(u32::MAX)) {
                        cx.error_spanned_by(
                            &count.expr,
                            "`max_deliveries` must fit in a `u32`",
                        );
                    }
                    self.max_deliveries = Some(count);
                }
            }
            "by_key" => cx.error_spanned_by(
                &ident,
                "`by_key` goes inside `workers`: `workers(8, by_key)`",
            ),
            method if DESCRIPTOR_METHODS.contains(&method) => cx.error_spanned_by(
                &ident,
                format!(
                    "`{method}` is a method of the stream descriptor: `RedisStream::new(\"orders\").{method}(..)`"
                ),
            ),
            _ => {
                let mut message = format!("unknown option `{name}`; expected {OPTIONS_LIST}");
                if let Some(close) = did_you_mean(name, OPTIONS) {
                    message = format!("unknown option `{name}`: did you mean `{close}`?");
                }
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
            && prefetch < workers
        {
            cx.error_spanned_by(
                    expr,
                    format!(
                        "`prefetch({prefetch})` is less than `workers({workers})`: read ahead at least one entry per worker"
                    ),
                );
        }
    }
}

/// The arguments of an option that needs parentheses; an error if it has none.
fn expect_args(
    cx: &Ctxt,
    name: &Ident,
    args: Option<(token::Paren, Punctuated<Expr, Token![,]>)>,
    example: &str,
) -> Option<Punctuated<Expr, Token![,]>> {
    match args {
        Some((paren, args)) if args.is_empty() => {
            cx.error_at(
                paren.span.join(),
                format!("`{name}` needs an argument: `{example}`"),
            );
            None
        }
        Some((_, args)) => Some(args),
        None => {
            cx.error_spanned_by(name, format!("`{name}` needs an argument: `{example}`"));
            None
        }
    }
}

/// A count option's argument. A literal must be a whole number of at least
/// one; any other expression is taken as is (and checked at start-up).
fn count(cx: &Ctxt, option: &str, expr: Expr) -> Count {
    let literal = match &expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => match int.base10_parse::<u64>() {
            Ok(0) => {
                cx.error_spanned_by(int, zero_message(option));
                None
            }
            Ok(n) => Some(n),
            Err(error) => {
                cx.syn_error(error);
                None
            }
        },
        Expr::Lit(lit) => {
            cx.error_spanned_by(lit, format!("`{option}` takes a whole number"));
            None
        }
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_), ..
        }) => {
            cx.error_spanned_by(&expr, zero_message(option));
            None
        }
        _ => None,
    };
    Count { expr, literal }
}

/// Why a count option cannot be zero (or less).
fn zero_message(option: &str) -> String {
    let why = match option {
        "workers" => "it is how many handlers run at once",
        "max_deliveries" => {
            "it is how many deliveries an entry gets; leave the option out for no bound"
        }
        _ => "it is how many entries are read ahead of the handlers",
    };
    format!("`{option}` must be at least 1: {why}")
}

/// Checks that `descriptor` is `RedisStream::{new,claiming,reclaim}(..)`
/// followed by builder methods, each at most once, `.group(..)` among them.
/// False if it is an option instead (the descriptor was left out or put
/// after the options).
fn check_descriptor(cx: &Ctxt, descriptor: &Expr) -> bool {
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
                "the stream descriptor comes first, e.g. `#[subscriber({}, workers(4))]`",
                &DESCRIPTOR_EXAMPLE[1..DESCRIPTOR_EXAMPLE.len() - 1]
            ),
        );
        return false;
    }
    match root {
        Expr::Call(call) => {
            if !check_constructor(cx, call) {
                // The methods of something that is not a descriptor would
                // only add noise.
                return true;
            }
        }
        other => {
            cx.error_spanned_by(
                other,
                format!("expected a stream descriptor, e.g. {DESCRIPTOR_EXAMPLE}"),
            );
            return true;
        }
    }

    let mut seen: Vec<String> = Vec::new();
    let mut unknown = false;
    for call in &methods {
        let method = call.method.unraw().to_string();
        if !DESCRIPTOR_METHODS.contains(&method.as_str()) {
            unknown = true;
            let message = match did_you_mean(&method, DESCRIPTOR_METHODS) {
                Some(close) => format!(
                    "unknown stream descriptor method `.{method}(..)`: did you mean `.{close}(..)`?"
                ),
                None => format!(
                    "unknown stream descriptor method `.{method}(..)`; expected `.group(..)`, `.consumer(..)`, `.start_id(..)` or `.start_at(..)`"
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
    true
}

/// Whether `path` names a `#[subscriber]` option (the user left out the
/// descriptor and started with an option).
fn is_option_name(path: &ExprPath) -> bool {
    path.path
        .get_ident()
        .is_some_and(|ident| OPTIONS.contains(&ident.to_string().as_str()))
}

/// Checks the constructor a descriptor starts with; false if it is not one.
fn check_constructor(cx: &Ctxt, call: &ExprCall) -> bool {
    let expected = format!(
        "expected a stream descriptor starting with `RedisStream::new(..)`, `RedisStream::claiming(..)` or `RedisStream::reclaim(..)`, e.g. {DESCRIPTOR_EXAMPLE}"
    );
    let Expr::Path(path) = &*call.func else {
        cx.error_spanned_by(&call.func, expected);
        return false;
    };
    let segments: Vec<_> = path.path.segments.iter().collect();
    let [.., ty, ctor] = segments.as_slice() else {
        cx.error_spanned_by(path, expected);
        return false;
    };
    let ty_name = ty.ident.to_string();
    if !DESCRIPTOR_TYPES.contains(&ty_name.as_str()) {
        cx.error_spanned_by(
            &ty.ident,
            format!(
                "expected `RedisStream` (or `Stream`), not `{ty_name}`: a stream descriptor starts with `RedisStream::new(..)`, `RedisStream::claiming(..)` or `RedisStream::reclaim(..)`"
            ),
        );
        return false;
    }
    let ctor_name = ctor.ident.to_string();
    let Some((_, arity, usage)) = CONSTRUCTORS.iter().find(|(n, ..)| *n == ctor_name) else {
        let message = match did_you_mean(&ctor_name, &["new", "claiming", "reclaim"]) {
            Some(close) => format!(
                "unknown stream descriptor constructor `{ty_name}::{ctor_name}`: did you mean `{ty_name}::{close}`?"
            ),
            None => format!(
                "unknown stream descriptor constructor `{ty_name}::{ctor_name}`; expected `new(stream)` (new entries), `claiming(stream, min_idle)` (idle pending entries, then new ones) or `reclaim(stream, min_idle)` (idle pending entries only)"
            ),
        };
        cx.error_spanned_by(&ctor.ident, message);
        return true;
    };
    if call.args.len() != *arity {
        cx.error_at(
            call.paren_token.span.join(),
            format!("`{ty_name}::{ctor_name}` takes {usage}"),
        );
    }
    true
}

/// The closest of `candidates` to a misspelt `name`, if one is close: one
/// that starts with it (`claim` for `claiming`), or else one a few edits
/// away.
fn did_you_mean<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    if name.len() >= 3
        && let Some(prefixed) = candidates.iter().find(|c| c.starts_with(name))
    {
        return Some(prefixed);
    }
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
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

/// How the handler takes its payload.
#[derive(Debug)]
pub(crate) enum Payload {
    /// `&T`: decoded from JSON, lent to the handler.
    Borrowed(Type),
    /// `T`: decoded from JSON, given to the handler.
    Owned(Type),
    /// `&[u8]`: the raw payload, not decoded.
    RawSlice,
    /// `Vec<u8>`: a copy of the raw payload, not decoded.
    RawVec,
}

/// The handler function's signature, as the expansion needs it.
#[derive(Debug)]
pub(crate) struct Handler {
    pub(crate) payload: Payload,
    /// Whether it takes `&mut Context<'_>` second.
    pub(crate) context: bool,
    /// Its return type; `None` for `()` written as nothing.
    pub(crate) output: Option<Type>,
}

impl Handler {
    /// Checks the signature of a `#[subscriber]` function. `reply` is
    /// whether the `reply` option was given (`None` if the arguments could
    /// not be read).
    pub(crate) fn from_fn(cx: &Ctxt, function: &ItemFn, reply: Option<bool>) -> Option<Handler> {
        let sig = &function.sig;
        if sig.asyncness.is_none() {
            cx.error_spanned_by(
                sig.fn_token,
                "a subscriber must be an `async fn`: write `async fn`",
            );
        }
        check_plain_fn(
            cx,
            sig,
            "a subscriber",
            "each subscriber decodes one concrete payload type; write one per type",
        );

        let mut payload = None;
        let mut context = false;
        let mut context_first = false;
        let mut typed = 0;
        for input in &sig.inputs {
            let arg = match input {
                FnArg::Receiver(receiver) => {
                    cx.error_spanned_by(
                        receiver,
                        "a subscriber is a free function: it cannot take `self`",
                    );
                    continue;
                }
                FnArg::Typed(arg) => arg,
            };
            typed += 1;
            match typed {
                1 => {
                    payload = payload_of(cx, &arg.ty);
                    context_first = is_context(&arg.ty) || is_context_ref(&arg.ty);
                }
                // After the context came first, the payload is likely
                // second: one error for the swap is enough.
                2 if context_first => {}
                2 => context = context_param(cx, &arg.ty),
                _ => cx.error_spanned_by(
                    arg,
                    "too many parameters: a subscriber takes the payload and, optionally, `ctx: &mut Context<'_>`",
                ),
            }
        }
        if sig.inputs.is_empty() {
            cx.error_at(
                sig.paren_token.span.join(),
                "a subscriber takes the payload as its first parameter: `&T` or `T` (decoded from JSON), or `&[u8]` or `Vec<u8>` (raw bytes)",
            );
        }

        let output = match &sig.output {
            ReturnType::Default => {
                if reply == Some(true) {
                    cx.error_at(
                        sig.paren_token.span.close(),
                        "a `reply` subscriber returns the value to publish: add `-> T`, where `T: Outgoing + Serialize`",
                    );
                }
                None
            }
            ReturnType::Type(_, ty) => Some((**ty).clone()),
        };
        Some(Handler {
            payload: payload?,
            context,
            output,
        })
    }
}

/// Errors for `const`, `unsafe`, `extern`, generics and variadics, which no
/// function the macros take may have.
fn check_plain_fn(cx: &Ctxt, sig: &Signature, what: &str, why_not_generic: &str) {
    if let Some(token) = &sig.constness {
        cx.error_spanned_by(token, format!("{what} cannot be a `const fn`"));
    }
    if let Some(token) = &sig.unsafety {
        cx.error_spanned_by(token, format!("{what} cannot be `unsafe`"));
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(abi, format!("{what} cannot be `extern`"));
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            format!("{what} cannot be generic: {why_not_generic}"),
        );
    } else if let Some(where_clause) = &sig.generics.where_clause {
        cx.error_spanned_by(where_clause, format!("{what} cannot have a `where` clause"));
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, format!("{what} cannot be variadic"));
    }
}

/// Whether `ty` is (a path to) `Context`, with any generic arguments.
fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Path(TypePath { qself: None, path }) => path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "Context"),
        Type::Paren(inner) => is_context(&inner.elem),
        Type::Group(inner) => is_context(&inner.elem),
        _ => false,
    }
}

/// Whether `ty` is `&Context` or `&mut Context`.
fn is_context_ref(ty: &Type) -> bool {
    matches!(ty, Type::Reference(reference) if is_context(&reference.elem))
}

/// Whether `ty` is `u8`.
fn is_u8(ty: &Type) -> bool {
    matches!(ty, Type::Path(TypePath { qself: None, path }) if path.is_ident("u8"))
}

/// The payload parameter's kind, or an error on its type.
fn payload_of(cx: &Ctxt, ty: &Type) -> Option<Payload> {
    const CONTEXT_SECOND: &str =
        "the payload comes first, then the context: `(payload: &T, ctx: &mut Context<'_>)`";
    match ty {
        Type::Paren(inner) => payload_of(cx, &inner.elem),
        Type::Group(inner) => payload_of(cx, &inner.elem),
        Type::Reference(reference) => {
            if is_context(&reference.elem) {
                cx.error_spanned_by(ty, CONTEXT_SECOND);
                return None;
            }
            if reference.mutability.is_some() {
                cx.error_spanned_by(
                    ty,
                    "the payload cannot be borrowed mutably: take `&T`, or `T` to own it",
                );
                return None;
            }
            if let Some(lifetime) = &reference.lifetime
                && lifetime.ident != "_"
            {
                cx.error_spanned_by(
                    lifetime,
                    "the payload's reference cannot name a lifetime: write `&T`",
                );
                return None;
            }
            match &*reference.elem {
                Type::Slice(slice) if is_u8(&slice.elem) => Some(Payload::RawSlice),
                Type::Path(TypePath { qself: None, path }) if path.is_ident("str") => {
                    cx.error_spanned_by(
                        ty,
                        "`&str` is not a payload type: take `&[u8]` for the raw bytes, or `String` to decode a JSON string",
                    );
                    None
                }
                elem => Some(Payload::Borrowed(elem.clone())),
            }
        }
        Type::Path(TypePath { qself: None, path }) => {
            let last = path.segments.last();
            if is_context(ty) {
                cx.error_spanned_by(ty, CONTEXT_SECOND);
                return None;
            }
            let is_byte_vec = last.is_some_and(|segment| {
                segment.ident == "Vec"
                    && matches!(&segment.arguments, PathArguments::AngleBracketed(args)
                        if args.args.len() == 1
                            && matches!(args.args.first(), Some(GenericArgument::Type(t)) if is_u8(t)))
            });
            Some(if is_byte_vec {
                Payload::RawVec
            } else {
                Payload::Owned(ty.clone())
            })
        }
        Type::ImplTrait(_) | Type::Infer(_) | Type::TraitObject(_) => {
            cx.error_spanned_by(
                ty,
                "the payload needs a concrete type to be decoded into, e.g. `&Payment`",
            );
            None
        }
        _ => Some(Payload::Owned(ty.clone())),
    }
}

/// Checks the second parameter, which can only be `&mut Context<'_>`.
fn context_param(cx: &Ctxt, ty: &Type) -> bool {
    match ty {
        Type::Reference(reference) if is_context(&reference.elem) => {
            if reference.mutability.is_none() {
                cx.error_spanned_by(ty, "take the context as `&mut Context<'_>`");
            }
            true
        }
        _ if is_context(ty) => {
            cx.error_spanned_by(ty, "take the context as `&mut Context<'_>`");
            true
        }
        _ => {
            cx.error_spanned_by(
                ty,
                "the second parameter of a subscriber can only be the context: `ctx: &mut Context<'_>`",
            );
            false
        }
    }
}

/// Checks a `#[ruststream::app]` function: `fn NAME() -> impl App`.
pub(crate) fn check_app_fn(cx: &Ctxt, attr: TokenStream, function: &ItemFn) {
    if !attr.is_empty() {
        cx.error_spanned_by(
            attr,
            "`#[ruststream::app]` takes no arguments: configure the app in the function's body",
        );
    }
    let sig = &function.sig;
    check_plain_fn(
        cx,
        sig,
        "the app function",
        "the generated `main` calls it as it is",
    );
    if let Some(token) = &sig.asyncness {
        cx.error_spanned_by(
            token,
            "the app function cannot be `async`: it only builds the app, which the generated `main` runs on a tokio runtime",
        );
    }
    if !sig.inputs.is_empty() {
        cx.error_spanned_by(
            &sig.inputs,
            "the app function takes no parameters: `fn app() -> impl App`",
        );
    }
    if let ReturnType::Default = sig.output {
        cx.error_at(
            sig.paren_token.span.close(),
            "the app function returns the app: add `-> impl App`",
        );
    }
    if sig.ident == "main" {
        cx.error_spanned_by(
            &sig.ident,
            "name the app function something other than `main`: `#[ruststream::app]` writes `main` itself",
        );
    }
}

/// The stream name of `#[derive(Outgoing)]`'s `#[outgoing(name = "..")]`.
pub(crate) fn outgoing_name(cx: &Ctxt, input: &DeriveInput) -> Option<LitStr> {
    let attrs: Vec<&Attribute> = input
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("outgoing"))
        .collect();
    if attrs.is_empty() {
        cx.error_spanned_by(
            &input.ident,
            format!(
                "missing `#[outgoing(name = \"...\")]`: name the stream `{}` values are published to",
                input.ident
            ),
        );
        return None;
    }
    let mut name: Option<LitStr> = None;
    for attr in attrs {
        let mut named = false;
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("name") {
                let value: Expr = meta.value()?.parse()?;
                named = true;
                match value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(lit), ..
                    }) => {
                        if name.is_some() {
                            cx.error_spanned_by(&meta.path, "duplicate `name`: give it once");
                        } else if lit.value().is_empty() {
                            cx.error_spanned_by(&lit, "the stream name cannot be empty");
                        } else {
                            name = Some(lit);
                        }
                    }
                    other => cx.error_spanned_by(
                        other,
                        "expected the stream name as a string literal: `name = \"payments\"`",
                    ),
                }
            } else {
                let key = meta.path.to_token_stream().to_string().replace(' ', "");
                cx.error_spanned_by(
                    &meta.path,
                    format!("unknown key `{key}` in `#[outgoing]`; expected `name = \"...\"`"),
                );
                // Skip its value so that the keys after it are still read.
                if meta.input.peek(Token![=]) {
                    meta.value()?.parse::<Expr>()?;
                } else if meta.input.peek(token::Paren) {
                    meta.parse_nested_meta(|_| Ok(()))?;
                }
            }
            Ok(())
        });
        match parsed {
            Err(error) => cx.syn_error(error),
            Ok(()) if !named => cx.error_spanned_by(
                attr,
                "missing `name`: `#[outgoing(name = \"...\")]` names the stream values of this type are published to",
            ),
            Ok(()) => {}
        }
    }
    name
}

#[cfg(test)]
mod tests;
