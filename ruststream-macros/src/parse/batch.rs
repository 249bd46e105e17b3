//! `batch(max = n, wait = d)`: the option, what it cannot be combined
//! with, and the payload parameter of a batch handler (`Vec<T>` or `&[T]`).

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::{Expr, ExprAssign, ExprLit, GenericArgument, Lit, LitInt, PathArguments, Type, TypePath};

use super::args::{OptionArgs, SubscriberArgs, did_you_mean, expect_args};
use super::handler::{Payload, is_u8};
use crate::ctxt::Ctxt;
use crate::parse::code;
use ruststream_core::{BATCH_WITH_BY_KEY, BackoffPolicy, check_prefetch_covers_batch};

/// How `batch` is written, for messages.
const EXAMPLE: &str = "batch(max = 500, wait = 10ms)";

/// The most entries one batch may hold: each entry of a batch takes a lane.
const MAX_BATCH: u64 = 100_000;

/// `batch(max = n, wait = d)`, checked.
#[derive(Debug)]
pub(crate) struct BatchArgs {
    /// The `batch` keyword, where errors about the option as a whole go.
    pub(crate) span: Span,
    pub(crate) max: u64,
    pub(crate) wait: Duration,
}

/// Reads `batch(max = n, wait = d)`: both keys, once each, as literals.
pub(super) fn batch_option(cx: &Ctxt, span: Span, args: Option<OptionArgs>) -> Option<BatchArgs> {
    let args = expect_args(cx, "batch", span, args, EXAMPLE)?;
    let mut max: Option<Option<u64>> = None;
    let mut wait: Option<Option<Duration>> = None;
    // After a malformed argument, a missing key is not news.
    let mut malformed = false;
    for arg in &args {
        let Expr::Assign(ExprAssign { left, right, .. }) = arg else {
            malformed = true;
            cx.error_spanned_by(
                arg,
                format!("write `batch`'s arguments as `max = n` and `wait = d`: `{EXAMPLE}`"),
            );
            continue;
        };
        let key = match &**left {
            Expr::Path(path) => path.path.get_ident().map(|ident| ident.unraw().to_string()),
            _ => None,
        };
        match key.as_deref() {
            Some("max") if max.is_some() => cx.error_spanned_by(left, "`max` is given twice"),
            Some("max") => max = Some(batch_max(cx, right)),
            Some("wait") if wait.is_some() => cx.error_spanned_by(left, "`wait` is given twice"),
            Some("wait") => wait = Some(wait_duration(cx, right)),
            Some(other) => {
                malformed = true;
                let message = match did_you_mean(other, ["max", "wait"]) {
                    Some(close) => {
                        format!("unknown key `{other}` in `batch`: did you mean `{close}`?")
                    }
                    None => format!(
                        "unknown key `{other}` in `batch`; expected `max = n` and `wait = d`"
                    ),
                };
                cx.error_spanned_by(left, message);
            }
            None => {
                malformed = true;
                cx.error_spanned_by(left, format!("expected `max` or `wait`: `{EXAMPLE}`"));
            }
        }
    }
    let missing: Vec<&str> = [("`max = n`", max.is_none()), ("`wait = d`", wait.is_none())]
        .into_iter()
        .filter_map(|(key, missing)| missing.then_some(key))
        .collect();
    if !missing.is_empty() && !malformed {
        cx.error_at(
            span,
            format!(
                "`batch` needs {}: a batch runs once it holds `max` entries or `wait` after its first, e.g. `{EXAMPLE}`",
                missing.join(" and ")
            ),
        );
    }
    Some(BatchArgs {
        span,
        max: max??,
        wait: wait??,
    })
}

/// An integer literal (with any suffix) and its value; `not_literal` is
/// the error for anything else.
fn int_literal<'a>(cx: &Ctxt, expr: &'a Expr, not_literal: &str) -> Option<(&'a LitInt, u64)> {
    let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = expr
    else {
        cx.error_spanned_by(expr, not_literal);
        return None;
    };
    int.base10_parse::<u64>()
        .map(|value| (int, value))
        .map_err(|error| cx.syn_error(error))
        .ok()
}

/// `max`: a whole number literal, from 1 to [`MAX_BATCH`].
fn batch_max(cx: &Ctxt, expr: &Expr) -> Option<u64> {
    let (int, value) = int_literal(
        cx,
        expr,
        "write `max` as a whole number literal: `max = 500` (it sizes the subscriber's lanes, checked here)",
    )?;
    if value == 0 {
        cx.error_spanned_by(
            int,
            "`max` must be at least 1: it is how many entries one batch holds",
        );
        return None;
    }
    if value > MAX_BATCH {
        cx.error_spanned_by(
            int,
            format!(
                "`max` must be at most {MAX_BATCH}: every entry of a batch in work takes a lane"
            ),
        );
        return None;
    }
    Some(value)
}

/// `wait`: a whole number literal with a unit (`10ms`, `1s`, `5min`,
/// `1h`), more than zero.
fn wait_duration(cx: &Ctxt, expr: &Expr) -> Option<Duration> {
    let (int, value) = int_literal(
        cx,
        expr,
        "write `wait` as a whole number literal with a unit: `10ms`, `1s`, `5min` or `1h`",
    )?;
    let message = if int.suffix().is_empty() {
        format!("`wait` needs a unit (`ms`, `s`, `min` or `h`): `{value}ms`, `{value}s`")
    } else if value == 0 {
        "`wait` must be more than zero: it is how long a batch waits for more entries after its first".to_owned()
    } else {
        match BackoffPolicy::duration_literal(value, int.suffix()) {
            Ok(wait) => return Some(wait),
            Err(message) => message,
        }
    };
    cx.error_spanned_by(int, message);
    None
}

impl BatchArgs {
    /// What `batch` cannot be combined with: `by_key`, `reply`, and a
    /// `prefetch` under one batch.
    pub(super) fn check_conflicts(&self, cx: &Ctxt, args: &SubscriberArgs) {
        if args.workers.as_ref().is_some_and(|w| w.by_key) {
            cx.error_at(self.span, BATCH_WITH_BY_KEY);
        }
        if let Some(reply) = &args.reply {
            cx.error_spanned_by(
                reply,
                "a batch subscriber cannot `reply`: it returns outcomes for its entries; drop `reply` and publish from the handler with a `Publisher`",
            );
        }
        if let Some(prefetch) = &args.prefetch
            && let Some(n) = prefetch.literal
            && let Err(message) = check_prefetch_covers_batch(n, self.max)
        {
            cx.error_spanned_by(&prefetch.expr, message);
        }
    }
}

/// The payload parameter of a batch handler: `Vec<T>` or `&[T]`, one
/// value per entry. `owned` checks `T` as a single payload type is checked.
pub(super) fn batch_payload(
    cx: &Ctxt,
    ty: &Type,
    owned: impl Fn(&Type) -> bool,
) -> Option<Payload> {
    const WHAT: &str = "a `batch` subscriber takes its entries as `Vec<T>` or `&[T]`, one value per entry (decoded from JSON; `Vec<Vec<u8>>` for the raw bytes)";
    let (elem, lent) = match ty {
        Type::Paren(inner) => return batch_payload(cx, &inner.elem, owned),
        Type::Group(inner) => return batch_payload(cx, &inner.elem, owned),
        Type::Reference(reference) if reference.mutability.is_none() => match &*reference.elem {
            Type::Slice(slice) => (&*slice.elem, true),
            _ => {
                cx.error_spanned_by(ty, format!("{WHAT}: take `&[{}]`", code(&reference.elem)));
                return None;
            }
        },
        Type::Path(TypePath { qself: None, path }) => match vec_elem(path) {
            Some(elem) => (elem, false),
            None => {
                cx.error_spanned_by(ty, format!("{WHAT}: take `Vec<{}>`", code(ty)));
                return None;
            }
        },
        _ => {
            cx.error_spanned_by(ty, WHAT);
            return None;
        }
    };
    if is_u8(elem) {
        cx.error_spanned_by(
            ty,
            format!("{WHAT}: `{}` would be one byte per entry; take `Vec<Vec<u8>>` for each entry's raw bytes", code(ty)),
        );
        return None;
    }
    if !owned(elem) {
        return None;
    }
    let raw = matches!(elem, Type::Path(TypePath { qself: None, path }) if vec_elem(path).is_some_and(is_u8));
    Some(Payload::Batch {
        elem: elem.clone(),
        lent,
        raw,
    })
}

/// `T` of a path `Vec<T>`.
fn vec_elem(path: &syn::Path) -> Option<&Type> {
    let last = path.segments.last()?;
    if last.ident != "Vec" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match (args.args.len(), args.args.first()) {
        (1, Some(GenericArgument::Type(elem))) => Some(elem),
        _ => None,
    }
}
