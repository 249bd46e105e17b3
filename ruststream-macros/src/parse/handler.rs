//! The `#[subscriber]` function's signature: the payload, the context,
//! what it returns, and the mistakes made in each.

use syn::ext::IdentExt;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, ItemFn, Lifetime, Pat, PathArguments, ReturnType,
    Signature, Type, TypePath, TypeReference,
};

use super::{check_generics, check_plain_fn, code};
use crate::ctxt::Ctxt;

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
    /// A batch handler's `Vec<T>` (or `&[T]`: `lent`), one `T` per entry,
    /// decoded from JSON (or, `raw`, each entry's bytes: `T` is `Vec<u8>`).
    Batch { elem: Type, lent: bool, raw: bool },
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

/// Whether `attr` is `#[subscriber(..)]` (by any path).
pub(crate) fn is_subscriber_attr(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "subscriber")
}

/// Whether `sig` takes `self`: the function is a method, in an `impl` or
/// trait block, where a struct cannot be written.
pub(crate) fn is_method(sig: &Signature) -> bool {
    sig.receiver().is_some()
}

impl Handler {
    /// Checks a `#[subscriber]` function. `reply` is whether the `reply`
    /// option was given (`None` if the arguments could not be read), and
    /// `batch` whether `batch(..)` was.
    pub(crate) fn from_fn(
        cx: &Ctxt,
        function: &ItemFn,
        reply: Option<bool>,
        batch: bool,
    ) -> Option<Handler> {
        check_attrs(cx, function);
        let sig = &function.sig;
        let declared = check_kind(cx, sig);
        let (payload, context) = check_params(cx, sig, &declared, batch);
        let output = check_output(cx, sig, reply);
        Some(Handler {
            payload: payload?,
            context,
            output,
        })
    }
}

/// A second `#[subscriber]` on the function.
fn check_attrs(cx: &Ctxt, function: &ItemFn) {
    for attr in function
        .attrs
        .iter()
        .filter(|attr| is_subscriber_attr(attr))
    {
        cx.error_spanned_by(
            attr,
            format!(
                "`#[subscriber]` is given twice: a function is one subscriber; for a second subscription write another function, which may call `{}::handler(..)`",
                function.sig.ident.unraw()
            ),
        );
    }
}

/// Checks what kind of function it is (`async`, not `const`, not generic,
/// ..), and returns its lifetime parameters, already reported.
fn check_kind<'a>(cx: &Ctxt, sig: &'a Signature) -> Vec<&'a Lifetime> {
    if sig.asyncness.is_none() {
        cx.error_spanned_by(
            sig.fn_token,
            "a subscriber must be an `async fn`: write `async fn`",
        );
    }
    check_plain_fn(cx, sig, "a subscriber");
    // Lifetime parameters get their own message: they are how one would
    // try to borrow the payload.
    let declared: Vec<&Lifetime> = sig.generics.lifetimes().map(|l| &l.lifetime).collect();
    if !declared.is_empty() && declared.len() == sig.generics.params.len() {
        cx.error_spanned_by(
            &sig.generics,
            format!(
                "a subscriber takes no lifetime parameters: {OWNED}, lent to the handler for one call; take the payload as `&T` and the context as `&mut Context<'_>`"
            ),
        );
    } else {
        check_generics(
            cx,
            sig,
            "a subscriber",
            "each subscriber decodes one concrete payload type; write one per type",
        );
    }
    declared
}

/// Checks the parameters: the payload (its kind, if it is one), then
/// whether the context follows.
fn check_params(
    cx: &Ctxt,
    sig: &Signature,
    declared: &[&Lifetime],
    batch: bool,
) -> (Option<Payload>, bool) {
    let mut payload = None;
    let mut context = false;
    let mut context_first = false;
    let mut typed = 0;
    for input in &sig.inputs {
        let arg = match input {
            FnArg::Receiver(receiver) => {
                cx.error_spanned_by(
                    receiver,
                    format!(
                        "`#[subscriber]` goes on a free function, not a method: move `{}` out of the `impl` block and drop `self`",
                        sig.ident.unraw()
                    ),
                );
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        check_param_name(cx, &sig.ident, &arg.pat);
        typed += 1;
        match typed {
            1 if batch => {
                payload = super::batch::batch_payload(cx, &arg.ty, |elem| {
                    owned(cx, elem, declared)
                });
            }
            1 => {
                payload = payload_of(cx, &arg.ty, declared);
                context_first = is_context(&arg.ty) || is_context_ref(&arg.ty);
            }
            2 if batch => cx.error_spanned_by(
                arg,
                "a `batch` subscriber takes only its entries, `Vec<T>` or `&[T]`: there is no one context for a batch",
            ),
            // After the context came first, the payload is likely second:
            // one error for the swap is enough.
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
    (payload, context)
}

/// The return type; `reply` as in [`Handler::from_fn`].
fn check_output(cx: &Ctxt, sig: &Signature, reply: Option<bool>) -> Option<Type> {
    match &sig.output {
        ReturnType::Default => {
            if reply == Some(true) {
                cx.error_at(
                    sig.paren_token.span.close(),
                    "a `reply` subscriber returns the value to publish: add `-> T`, where `T: Outgoing + Serialize`",
                );
            }
            None
        }
        ReturnType::Type(_, ty) => {
            if reply == Some(true) {
                check_reply_output(cx, ty);
            }
            Some((**ty).clone())
        }
    }
}

/// A parameter that binds the function's own name would not bind at all:
/// the name becomes a unit struct, so the parameter is a pattern matching
/// it.
fn check_param_name(cx: &Ctxt, function: &Ident, pat: &Pat) {
    if let Some(binding) = binding_named(pat, function) {
        cx.error_spanned_by(
            binding,
            format!(
                "the parameter `{name}` is named like its function: `#[subscriber]` turns `{name}` into a unit struct, which this parameter would match instead of binding the payload; rename the parameter",
                name = function.unraw()
            ),
        );
    }
}

/// Whether a parameter of `sig` binds `name` (see [`check_param_name`]).
pub(crate) fn param_named_like_fn(sig: &Signature, name: &Ident) -> bool {
    sig.inputs.iter().any(|input| match input {
        FnArg::Typed(arg) => binding_named(&arg.pat, name).is_some(),
        FnArg::Receiver(_) => false,
    })
}

/// The binding of `pat` that is called `name`, if any.
fn binding_named<'a>(pat: &'a Pat, name: &Ident) -> Option<&'a Ident> {
    fn in_all<'a>(pats: impl IntoIterator<Item = &'a Pat>, name: &Ident) -> Option<&'a Ident> {
        pats.into_iter().find_map(|pat| binding_named(pat, name))
    }
    match pat {
        Pat::Ident(binding) => {
            if binding.ident.unraw() == name.unraw() {
                return Some(&binding.ident);
            }
            binding
                .subpat
                .as_ref()
                .and_then(|(_, sub)| binding_named(sub, name))
        }
        Pat::Tuple(tuple) => in_all(&tuple.elems, name),
        Pat::TupleStruct(tuple) => in_all(&tuple.elems, name),
        Pat::Slice(slice) => in_all(&slice.elems, name),
        Pat::Struct(fields) => in_all(fields.fields.iter().map(|field| &*field.pat), name),
        Pat::Reference(reference) => binding_named(&reference.pat, name),
        Pat::Paren(inner) => binding_named(&inner.pat, name),
        Pat::Type(typed) => binding_named(&typed.pat, name),
        _ => None,
    }
}

/// A `reply` handler's return type must be the value to publish: a type
/// that settles the entry or may have no value is a mistake, with its own
/// way out.
fn check_reply_output(cx: &Ctxt, ty: &Type) {
    const PUBLISH: &str =
        "take `ctx: &mut Context<'_>` and publish with `ctx.publisher().publish(&value).await`";
    match ty {
        Type::Paren(inner) => check_reply_output(cx, &inner.elem),
        Type::Group(inner) => check_reply_output(cx, &inner.elem),
        Type::Tuple(tuple) if tuple.elems.is_empty() => cx.error_spanned_by(
            ty,
            "a `reply` subscriber returns the value to publish, not `()`: return a `T: Outgoing + Serialize`, or drop `reply`",
        ),
        Type::Path(TypePath { qself: None, path }) => {
            let Some(last) = path.segments.last() else {
                return;
            };
            let message = if last.ident == "Option" {
                format!(
                    "`reply` publishes every value the handler returns, so it cannot return `Option<..>`: to reply only sometimes, drop `reply`, {PUBLISH}, and return `HandlerOutcome`"
                )
            } else if last.ident == "Result" {
                format!(
                    "`reply` publishes every value the handler returns, so it cannot return `Result<..>`: to reply only on success, drop `reply`, {PUBLISH}, and return `Result<(), E>` (an `Err` is retried)"
                )
            } else if last.ident == "HandlerOutcome" {
                format!(
                    "a `reply` subscriber returns the value to publish, and `HandlerOutcome` only settles the entry: drop `reply`; to publish as well, {PUBLISH}"
                )
            } else {
                return;
            };
            cx.error_spanned_by(ty, message);
        }
        _ => {}
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
pub(super) fn is_u8(ty: &Type) -> bool {
    matches!(ty, Type::Path(TypePath { qself: None, path }) if path.is_ident("u8"))
}

/// Payloads are decoded into owned values: said by every message about a
/// payload that borrows.
const OWNED: &str = "payloads are decoded into owned values";

/// The payload parameter's kind, or an error on its type.
/// `declared`: the function's lifetime parameters, already reported.
fn payload_of(cx: &Ctxt, ty: &Type, declared: &[&Lifetime]) -> Option<Payload> {
    const CONTEXT_SECOND: &str =
        "the payload comes first, then the context: `(payload: &T, ctx: &mut Context<'_>)`";
    match ty {
        Type::Paren(inner) => payload_of(cx, &inner.elem, declared),
        Type::Group(inner) => payload_of(cx, &inner.elem, declared),
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
            // What cannot be a payload at all comes first: naming its
            // lifetime would not help.
            match &*reference.elem {
                Type::Slice(slice) if !is_u8(&slice.elem) => {
                    slice_error(cx, ty, &slice.elem);
                    return None;
                }
                Type::Path(TypePath { qself: None, path }) if path.is_ident("str") => {
                    cx.error_spanned_by(
                        ty,
                        "`&str` is not a payload type: take `&[u8]` for the raw bytes, or `String` to decode a JSON string",
                    );
                    return None;
                }
                _ => {}
            }
            if let Some(lifetime) = &reference.lifetime
                && lifetime.ident != "_"
                && !declared.contains(&lifetime)
            {
                cx.error_spanned_by(
                    lifetime,
                    format!(
                        "the payload cannot be borrowed for `{lifetime}`: {OWNED}, lent to the handler for one call; write `&{}`",
                        code(&reference.elem)
                    ),
                );
                return None;
            }
            match &*reference.elem {
                Type::Slice(_) => Some(Payload::RawSlice),
                elem => owned(cx, elem, declared).then(|| Payload::Borrowed(elem.clone())),
            }
        }
        Type::Slice(slice) => {
            slice_error(cx, ty, &slice.elem);
            None
        }
        Type::Path(TypePath { qself: None, path }) => {
            let last = path.segments.last();
            if is_context(ty) {
                cx.error_spanned_by(ty, CONTEXT_SECOND);
                return None;
            }
            if !owned(cx, ty, declared) {
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
        _ => owned(cx, ty, declared).then(|| Payload::Owned(ty.clone())),
    }
}

/// `&[T]` or `[T]` as the payload: a JSON array decodes into a `Vec`.
fn slice_error(cx: &Ctxt, ty: &Type, elem: &Type) {
    cx.error_spanned_by(
        ty,
        format!(
            "a payload cannot be a slice: take `Vec<{elem}>`, decoded from a JSON array",
            elem = code(elem)
        ),
    );
}

/// Whether a payload type owns its data; an error on the part that
/// borrows if not (decoding could only lend it for the call, and a type
/// that borrows from its input is not `for<'de> Deserialize<'de>`).
fn owned(cx: &Ctxt, ty: &Type, declared: &[&Lifetime]) -> bool {
    match borrowed_part(ty) {
        None => true,
        Some(Borrow::Lifetime(lifetime)) if declared.contains(&lifetime) => true,
        Some(Borrow::Reference(reference)) => {
            let instead = match &*reference.elem {
                Type::Path(TypePath { qself: None, path }) if path.is_ident("str") => {
                    "String".to_owned()
                }
                Type::Slice(slice) => format!("Vec<{}>", code(&slice.elem)),
                elem => code(elem),
            };
            cx.error_spanned_by(
                reference,
                format!(
                    "the payload cannot hold a reference (`{}`): {OWNED}; use `{instead}`",
                    code(reference)
                ),
            );
            false
        }
        Some(Borrow::Lifetime(lifetime)) => {
            cx.error_spanned_by(
                lifetime,
                format!(
                    "the payload type cannot borrow for `{lifetime}`: {OWNED}; give it owned fields (`String` for `&str`, `Vec<T>` for `&[T]`) and no lifetime parameter"
                ),
            );
            false
        }
    }
}

/// A part of a type that borrows.
enum Borrow<'a> {
    /// `&T` inside the type.
    Reference(&'a TypeReference),
    /// A lifetime argument other than `'static`: `Payment<'a>`, `Cow<'_, str>`.
    Lifetime(&'a Lifetime),
}

/// The first part of `ty` that borrows, if any.
fn borrowed_part(ty: &Type) -> Option<Borrow<'_>> {
    match ty {
        Type::Reference(reference) => Some(Borrow::Reference(reference)),
        Type::Path(path) => {
            if let Some(qself) = &path.qself
                && let Some(found) = borrowed_part(&qself.ty)
            {
                return Some(found);
            }
            path.path.segments.iter().find_map(|segment| {
                let PathArguments::AngleBracketed(args) = &segment.arguments else {
                    return None;
                };
                args.args.iter().find_map(|arg| match arg {
                    GenericArgument::Lifetime(lifetime)
                        if lifetime.ident != "static" && lifetime.ident != "_" =>
                    {
                        Some(Borrow::Lifetime(lifetime))
                    }
                    GenericArgument::Type(ty) => borrowed_part(ty),
                    GenericArgument::AssocType(assoc) => borrowed_part(&assoc.ty),
                    _ => None,
                })
            })
        }
        Type::Tuple(tuple) => tuple.elems.iter().find_map(borrowed_part),
        Type::Array(array) => borrowed_part(&array.elem),
        Type::Slice(slice) => borrowed_part(&slice.elem),
        Type::Paren(inner) => borrowed_part(&inner.elem),
        Type::Group(inner) => borrowed_part(&inner.elem),
        _ => None,
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
