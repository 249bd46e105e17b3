//! Code generation for the three macros.
//!
//! Each macro makes one [`Ctxt`], passes it through every check in
//! `parse.rs`, and looks at it once, before writing anything (as
//! serde_derive does). Without errors it writes the code in the steps
//! below; with errors it writes stand-ins that compile (as thiserror's
//! fallback does), so that the user sees the macro's errors and no second
//! error where the item is used (`b.include(x)`, `x::handler(..)`, a
//! binary's `main`, a type's `STREAM`).
//!
//! Paths are absolute (`::ruststream::__private::..`), so the generated code
//! works whatever the user imported. Impls go in `const _: () = { .. };` so
//! that their helper items pollute nothing. Bindings of generated code are
//! prefixed `__ruststream_` (and mixed-site), so a user's constant named
//! `payload` cannot turn a binding into a pattern match; the one exception,
//! `handle`'s `ctx`, is shown in docs and IDEs and is protected otherwise
//! (see `subscriber_impl`).
//!
//! Type checks are spanned on the user's own type, as in axum-macros'
//! `#[debug_handler]`: the payload is decoded with `decode_payload::<T>`
//! where the `T` tokens are the user's, and the return value is settled
//! through `<R as IntoSettle>::into_settle` or `reply::<R>`, so a payload
//! that is not `Deserialize` or a return type that cannot settle an entry
//! is reported on that type, once, instead of on the attribute. (A separate
//! assertion beside each call would report the same mistake twice.)

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Attribute, Block, DeriveInput, Expr, ExprLit, Ident, ItemFn, Lit, ReturnType, Signature, Type,
    Visibility,
};

use crate::ctxt::Ctxt;
use crate::parse::{self, Count, Handler, Mode, Payload, SubscriberArgs, Workers, code};
use ruststream_core::{BackoffCurve, BackoffPolicy};

/// `#[subscriber(..)]`.
pub(crate) fn subscriber(attr: TokenStream, item: TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    let args = parse::subscriber_args(&cx, attr);
    let Ok(function) = syn::parse2::<ItemFn>(item.clone()) else {
        cx.error_at(
            Span::call_site(),
            "`#[subscriber]` goes on an `async fn` that handles one entry, e.g. `async fn post_payment(payment: &Payment) -> HandlerOutcome`",
        );
        return original_with_errors(item, cx);
    };
    let handler = Handler::from_fn(
        &cx,
        &function,
        args.as_ref().map(|a| a.reply.is_some()),
        args.as_ref().is_some_and(|a| a.batched),
    );
    let errors = match (cx.check(), args, handler) {
        (Ok(()), Some(args), Some(handler)) => {
            return SubscriberFn::new(function).expand(&args, &handler);
        }
        (Err(errors), ..) => errors,
        // Every check that gives up records why, so this is a bug here;
        // still, never expand a subscriber that was not fully read.
        (Ok(()), ..) => syn::Error::new(
            Span::call_site(),
            "ruststream-macros could not read this subscriber; please report this",
        ),
    };
    let errors = errors.to_compile_error();
    if parse::is_method(&function.sig) {
        // In an `impl` block, where no struct can be written: the method
        // as written keeps the rest of the block compiling.
        let mut function = function;
        function
            .attrs
            .retain(|attr| !parse::is_subscriber_attr(attr));
        return quote!(#function #errors);
    }
    let fallback = SubscriberFn::new(function).fallback();
    quote!(#fallback #errors)
}

/// The item as written, followed by the errors: on a mistake the user
/// sees the errors and the IDE keeps seeing the item.
fn original_with_errors(item: TokenStream, cx: Ctxt) -> TokenStream {
    let errors = cx.check().err().map(|e| e.to_compile_error());
    quote!(#item #errors)
}

/// A `#[subscriber]` function taken apart for the items written from it.
struct SubscriberFn {
    /// The function's name: the unit struct's.
    name: Ident,
    vis: Visibility,
    /// The signature, renamed `handler`.
    sig: Signature,
    block: Box<Block>,
    /// Doc comments: they describe the subscriber and the handler alike.
    docs: Vec<Attribute>,
    /// `#[cfg]`s: on every item written.
    cfgs: Vec<Attribute>,
    /// Every other attribute (lints, `#[tracing::instrument]`, ..): the
    /// handler's.
    attrs: Vec<Attribute>,
}

impl SubscriberFn {
    fn new(function: ItemFn) -> Self {
        let ItemFn {
            attrs,
            vis,
            mut sig,
            block,
        } = function;
        let name = sig.ident.clone();
        sig.ident = Ident::new("handler", name.span());
        let mut docs = Vec::new();
        let mut cfgs = Vec::new();
        let mut fn_attrs = Vec::new();
        for attr in attrs {
            if attr.path().is_ident("doc") {
                docs.push(attr);
            } else if attr.path().is_ident("cfg") {
                cfgs.push(attr);
            } else if !parse::is_subscriber_attr(&attr) {
                // A second `#[subscriber]` is an error reported already;
                // left on the handler it would expand again, inside an
                // `impl` block.
                fn_attrs.push(attr);
            }
        }
        SubscriberFn {
            name,
            vis,
            sig,
            block,
            docs,
            cfgs,
            attrs: fn_attrs,
        }
    }

    /// The subscriber: a unit struct named after the function, the
    /// function as its `handler`, its `Subscriber` impl and its
    /// registration.
    fn expand(self, args: &SubscriberArgs, handler: &Handler) -> TokenStream {
        let unit_struct = self.unit_struct(doc_line(args));
        let handler_fn = self.handler_fn();
        let subscription = subscription(args);
        let (decode_payload, methods) = match &handler.payload {
            Payload::Batch { elem, lent, raw } => self.batch_methods(handler, elem, *lent, *raw),
            _ => {
                let (decode_payload, body) = self.handle_body(handler, args.reply.is_some());
                (decode_payload, self.handle_method(&body))
            }
        };
        let subscriber_impl = self.subscriber_impl(args.reply.is_some(), &methods);
        let name_str = self.name.unraw().to_string();
        let line = quote_spanned!(Span::call_site()=> ::core::line!());
        let cfgs = &self.cfgs;
        quote! {
            #unit_struct

            #(#cfgs)*
            const _: () = {
                #handler_fn

                const INFO: ::ruststream::__private::SubscriberInfo =
                    ::ruststream::__private::SubscriberInfo {
                        name: #name_str,
                        module: ::core::module_path!(),
                        file: ::core::file!(),
                        line: #line,
                    };

                fn subscription() -> ::ruststream::__private::Subscription {
                    #subscription
                }

                #decode_payload

                #subscriber_impl

                ::ruststream::__private::inventory::submit! {
                    ::ruststream::__private::Registration { info: INFO, subscription }
                }
            };
        }
    }

    /// The unit struct that stands for the subscriber (`b.include(name)`),
    /// with the function's docs and, after them, `doc_line`.
    fn unit_struct(&self, doc_line: Option<String>) -> TokenStream {
        let SubscriberFn {
            name,
            vis,
            docs,
            cfgs,
            ..
        } = self;
        // After the user's docs, the line goes under a heading of its own,
        // rather than into whatever section they end with (`# Errors`).
        let heading = (!docs.is_empty() && doc_line.is_some()).then(|| {
            quote! {
                #[doc = ""]
                #[doc = "# Subscription"]
                #[doc = ""]
            }
        });
        let doc_line = doc_line.map(|line| quote!(#[doc = #line]));
        quote! {
            #(#docs)*
            #heading
            #doc_line
            #(#cfgs)*
            #[allow(non_camel_case_types)]
            #[derive(
                ::core::clone::Clone,
                ::core::marker::Copy,
                ::core::fmt::Debug,
                ::core::default::Default,
            )]
            #vis struct #name;
        }
    }

    /// The function as written, as the struct's `handler`. It keeps the
    /// user's docs, so lints that read them (`missing_errors_doc`,
    /// `missing_panics_doc`) see what the user wrote.
    fn handler_fn(&self) -> TokenStream {
        let SubscriberFn {
            name,
            vis,
            sig,
            block,
            docs,
            attrs,
            ..
        } = self;
        let docs = if docs.is_empty() {
            quote!(#[doc = "The handler as written; call it directly in unit tests."])
        } else {
            quote!(#(#docs)*)
        };
        quote! {
            impl #name {
                #docs
                // `#[subscriber]` requires `async` even where nothing is awaited.
                #[allow(clippy::unused_async)]
                #(#attrs)*
                #vis #sig #block
            }
        }
    }

    /// The body of `Subscriber::handle`: decode the payload, call the
    /// handler, turn what it returns into a `Settle`. Also the
    /// `decode_payload` helper it calls, if the payload is decoded.
    fn handle_body(&self, handler: &Handler, replies: bool) -> (Option<TokenStream>, TokenStream) {
        let name = &self.name;
        let ctx = context_ident();
        let payload = local("payload");
        let value = local("value");
        let error = local("error");
        let out = local("out");

        let (decode, argument) = match &handler.payload {
            Payload::Borrowed(ty) | Payload::Owned(ty) => {
                let decode = quote! {
                    let #payload = match decode_payload::<#ty>(#ctx.payload()) {
                        ::core::result::Result::Ok(#value) => #value,
                        ::core::result::Result::Err(#error) => {
                            return ::ruststream::__private::Settle::Undecodable(#error);
                        }
                    };
                };
                let argument = match &handler.payload {
                    Payload::Borrowed(_) => quote!(&#payload),
                    _ => quote!(#payload),
                };
                (decode, argument)
            }
            Payload::RawSlice => (quote!(), quote!(#ctx.payload())),
            // A batch payload is expanded by `batch_body`.
            Payload::RawVec | Payload::Batch { .. } => {
                (quote!(), quote!(::std::vec::Vec::from(#ctx.payload())))
            }
        };
        let decode_payload = match &handler.payload {
            Payload::Borrowed(_) | Payload::Owned(_) => Some(decode_payload_fn()),
            Payload::RawSlice | Payload::RawVec | Payload::Batch { .. } => None,
        };
        let context = handler.context.then(|| quote!(, #ctx));
        let call = quote!(#name::handler(#argument #context).await);
        let settle = match (&handler.output, replies) {
            (Some(ty), true) => {
                let reply = if nameable(ty) {
                    quote_spanned!(ty.span()=> ::ruststream::__private::reply::<#ty>)
                } else {
                    quote_spanned!(ty.span()=> ::ruststream::__private::reply)
                };
                quote! {
                    let #out = #call;
                    #reply(&#out)
                }
            }
            (Some(ty), false) => {
                let into_settle = trait_fn_on(ty, &quote!(IntoSettle), &quote!(into_settle));
                quote! {
                    let #out = #call;
                    #into_settle(#out)
                }
            }
            // Checked in parse: a `reply` subscriber has a return type.
            (None, _) => quote!(::ruststream::__private::IntoSettle::into_settle(#call)),
        };
        // Spanned on the function's `async`: a handler whose future is not
        // `Send` is reported there, with rustc's notes on what is held
        // across which `.await`.
        let body = quote_spanned! {self.async_span()=>
            async move {
                #decode
                #settle
            }
        };
        (decode_payload, body)
    }

    /// `Subscriber::handle`, running `body`.
    fn handle_method(&self, body: &TokenStream) -> TokenStream {
        let ctx = context_ident();
        let future = self.future_type();
        quote! {
            fn handle<'a>(
                &'a self,
                #ctx: &'a mut ::ruststream::__private::Context<'_>,
            ) -> #future {
                #body
            }
        }
    }

    /// `impl Subscriber` with `methods` (`handle`, and `handle_batch` for a
    /// batch subscriber); `subscription()` and `INFO` are written beside it.
    fn subscriber_impl(&self, replies: bool, methods: &TokenStream) -> TokenStream {
        let name = &self.name;
        let ctx = context_ident();
        quote! {
            // The context parameter is called `ctx`, as users call theirs,
            // and this `fn ctx` keeps a constant named `ctx` in the user's
            // scope from turning the parameter into a pattern (a pattern
            // binds when the name resolves to a function). The descriptor
            // is evaluated in `subscription()`, outside this block, so that
            // it still sees the user's `ctx`.
            const _: () = {
                #[allow(dead_code)]
                fn #ctx() {}

                #[automatically_derived]
                impl ::ruststream::__private::Subscriber for #name {
                    fn info(&self) -> ::ruststream::__private::SubscriberInfo {
                        INFO
                    }

                    fn subscription(&self) -> ::ruststream::__private::Subscription {
                        subscription()
                    }

                    fn replies(&self) -> bool {
                        #replies
                    }

                    #methods
                }
            };
        }
    }

    /// What `handle` returns, spanned on the function's `async` (see
    /// `handle_body`).
    pub(super) fn future_type(&self) -> TokenStream {
        quote_spanned! {self.async_span()=>
            impl ::core::future::Future<Output = ::ruststream::__private::Settle>
                + ::core::marker::Send
                + 'a
        }
    }

    pub(super) fn async_span(&self) -> Span {
        self.sig
            .asyncness
            .map_or_else(Span::call_site, |token| token.span)
    }

    /// What is written when the attribute or the function has a mistake:
    /// the struct, the function as its `handler` and a `Subscriber` impl
    /// that is never run, so that `b.include(name)` and
    /// `name::handler(..)` raise no second error.
    fn fallback(mut self) -> TokenStream {
        // What a handler must be, so that its callers see a handler:
        // `async` (a caller awaits it), and neither `const` nor `extern`,
        // which an `async fn` cannot be.
        self.sig.asyncness.get_or_insert_with(Default::default);
        self.sig.constness = None;
        self.sig.abi = None;
        self.sig.variadic = None;
        let name = &self.name;
        // A parameter named like the function is a pattern matching the
        // struct (an error already reported); this `fn` of that name
        // makes it a binding again, so the body raises no type errors.
        let rebind = parse::param_named_like_fn(&self.sig, name).then(|| {
            quote! {
                #[allow(dead_code)]
                fn #name() {}
            }
        });
        let unit_struct = self.unit_struct(None);
        let handler_fn = self.handler_fn();
        let future = self.future_type();
        let cfgs = &self.cfgs;
        quote! {
            #unit_struct

            #(#cfgs)*
            #[allow(dead_code)]
            const _: () = {
                #rebind

                #handler_fn

                #[automatically_derived]
                impl ::ruststream::__private::Subscriber for #name {
                    fn info(&self) -> ::ruststream::__private::SubscriberInfo {
                        ::core::unreachable!()
                    }

                    fn subscription(&self) -> ::ruststream::__private::Subscription {
                        ::core::unreachable!()
                    }

                    fn handle<'a>(
                        &'a self,
                        _: &'a mut ::ruststream::__private::Context<'_>,
                    ) -> #future {
                        async { ::core::unreachable!() }
                    }
                }
            };
        }
    }
}

/// A binding of generated code. Bindings are patterns, and a pattern naming
/// a constant in scope matches it instead of binding: hygiene does not help
/// there (items resolve at the call site), so the names are ones no user
/// writes.
pub(super) fn local(name: &str) -> Ident {
    Ident::new(&format!("__ruststream_{name}"), Span::mixed_site())
}

/// `decode_payload::<T>`, which the generated code decodes a payload with.
/// The bound is on `Deserialize` itself rather than `DeserializeOwned`, so
/// that a payload type without it gets serde's hint to derive it.
pub(super) fn decode_payload_fn() -> TokenStream {
    let payload = local("payload");
    quote! {
        fn decode_payload<T>(
            #payload: &[u8],
        ) -> ::core::result::Result<T, ::std::string::String>
        where
            T: for<'de> ::ruststream::__private::serde::Deserialize<'de>,
        {
            ::ruststream::__private::decode::<T>(#payload)
        }
    }
}

/// The context parameter of the generated `handle`: `ctx`, shown as such in
/// docs and IDEs (see `subscriber_impl` for why it is safe).
pub(super) fn context_ident() -> Ident {
    Ident::new("ctx", Span::mixed_site())
}

/// `Subscription::new(descriptor)` and the options, as written.
fn subscription(args: &SubscriberArgs) -> TokenStream {
    let descriptor = &args.descriptor.expr;
    let workers = args.workers.as_ref().map(|Workers { count, by_key }| {
        let n = &count.expr;
        let by_key = by_key.then(|| quote!(.by_key()));
        quote!(.workers(#n) #by_key)
    });
    let max_deliveries = args
        .max_deliveries
        .as_ref()
        .map(|Count { expr, .. }| quote!(.max_deliveries(#expr)));
    let prefetch = args
        .prefetch
        .as_ref()
        .map(|Count { expr, .. }| quote!(.prefetch(#expr)));
    let backoff = args.backoff.as_ref().map(backoff);
    let batch = args.batch.as_ref().map(batch::batch_option);
    quote! {
        ::ruststream::__private::Subscription::new(#descriptor)
            #workers
            #max_deliveries
            #prefetch
            #backoff
            #batch
    }
}

/// `.backoff(..)`: the policy the macro checked, built again from its
/// values through the same constructor (which cannot refuse it).
fn backoff(policy: &BackoffPolicy) -> TokenStream {
    let policy_path = quote!(::ruststream::__private::BackoffPolicy);
    let built = match policy.curve() {
        BackoffCurve::Fixed(delay) => {
            let delay = duration_tokens(delay);
            quote!(#policy_path::fixed(#delay))
        }
        BackoffCurve::Exponential { base, factor, max } => {
            let (base, max) = (duration_tokens(base), duration_tokens(max));
            let factor = proc_macro2::Literal::f64_suffixed(factor);
            quote!(#policy_path::exponential(#base, #factor, #max))
        }
    };
    let jitter = policy.has_jitter();
    quote!(.backoff(::ruststream::__private::checked_backoff(#built, #jitter)))
}

/// A `Duration` as code.
pub(super) fn duration_tokens(d: Duration) -> TokenStream {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

/// The subscriber's generated doc line: what it reads, as which group, and
/// on how many workers. `None` if the descriptor was not recognised.
fn doc_line(args: &SubscriberArgs) -> Option<String> {
    let reads = args.descriptor.reads.as_ref()?;
    let value = |expr: Option<&Expr>| match expr {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        })) => format!("`{}`", lit.value()),
        Some(expr) => format!("`{}`", code(expr)),
        None => "?".to_owned(),
    };
    let stream = value(reads.stream.as_ref());
    let group = value(reads.group.as_ref());
    let min_idle = value(reads.min_idle.as_ref());
    let mode = match reads.mode {
        Mode::New => "new entries".to_owned(),
        Mode::Claiming => format!("pending entries idle for {min_idle}, then new ones"),
        Mode::Reclaim => format!("pending entries idle for {min_idle} only"),
    };
    let workers = match &args.workers {
        None => "1 worker".to_owned(),
        Some(Workers { count, by_key }) => {
            let count = match count.literal {
                Some(1) => "1 worker".to_owned(),
                Some(n) => format!("{n} workers"),
                None => format!("`{}` workers", code(&count.expr)),
            };
            if *by_key {
                format!("{count}, in order per partition key")
            } else {
                count
            }
        }
    };
    let batches = args
        .batch
        .as_ref()
        .map(batch::doc_words)
        .unwrap_or_default();
    Some(format!(
        "Reads stream {stream} as consumer group {group}: {mode}, on {workers}{batches}."
    ))
}

/// `<ty as ::ruststream::__private::Trait>::function`, spanned on `ty`, so
/// that a `ty` that does not implement the trait is reported there (or
/// `Trait::function` for a `ty` that cannot be named there).
pub(super) fn trait_fn_on(
    ty: &Type,
    trait_name: &TokenStream,
    function: &TokenStream,
) -> TokenStream {
    if nameable(ty) {
        quote_spanned!(ty.span()=> <#ty as ::ruststream::__private::#trait_name>::#function)
    } else {
        quote_spanned!(ty.span()=> ::ruststream::__private::#trait_name::#function)
    }
}

/// Whether `ty` can be written in a qualified path (`<ty as Trait>`):
/// an `impl Trait` return type cannot.
pub(super) fn nameable(ty: &Type) -> bool {
    !matches!(ty, Type::ImplTrait(_))
}

/// `#[ruststream::app]`.
pub(crate) fn app(attr: TokenStream, item: TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    let Ok(function) = syn::parse2::<ItemFn>(item.clone()) else {
        cx.error_at(
            Span::call_site(),
            "`#[ruststream::app]` goes on the function that builds the app: `fn app() -> impl App`",
        );
        let errors = cx.check().err().map(|e| e.to_compile_error());
        let main = stand_in_main();
        return quote!(#item #main #errors);
    };
    parse::check_app_fn(&cx, attr, &function);
    if let Err(errors) = cx.check() {
        let errors = errors.to_compile_error();
        // Without a `main`, rustc would add that the crate has none.
        let main = (function.sig.ident != "main").then(stand_in_main);
        return quote!(#function #main #errors);
    }
    let name = &function.sig.ident;
    // Spanned on the return type, so that one that is not an app (say, a
    // `Result`) is reported there.
    let run_main = match &function.sig.output {
        ReturnType::Type(_, ty) => {
            let mut make_app = name.clone();
            make_app.set_span(ty.span());
            quote_spanned!(ty.span()=> ::ruststream::__private::run_main(#make_app))
        }
        ReturnType::Default => quote!(::ruststream::__private::run_main(#name)),
    };
    let at_root = crate_root_check(name);
    quote! {
        #function

        /// Runs the app built by the `#[ruststream::app]` function until
        /// SIGINT or SIGTERM.
        #[allow(dead_code)]
        fn main() {
            #run_main
        }

        #at_root
    }
}

/// The `main` written while the app function has a mistake: it stands in
/// for the real one, so that the macro's errors are the only ones.
fn stand_in_main() -> TokenStream {
    quote! {
        #[allow(dead_code)]
        fn main() {}
    }
}

/// An item that fails to compile, with a message naming the mistake, when
/// `#[ruststream::app]` is in a module of a binary whose crate root has no
/// `main`: the `main` it writes there is not the program's entry point.
///
/// A macro cannot see where it is; the check is done by name resolution
/// instead. In a block that glob-imports the crate root, `main` names the
/// root's `main` if there is one; if not, it names the stand-in declared
/// in the enclosing block (a glob import in an inner block shadows the
/// items of an outer one). Method resolution then tells the two apart by
/// type: an inherent method exists only for the stand-in, and its result
/// lacks the trait that carries the message.
///
/// Only binaries are checked (cargo sets `CARGO_BIN_NAME` for them): a
/// library has no `main`, wherever the attribute is.
fn crate_root_check(app: &Ident) -> Option<TokenStream> {
    std::env::var_os("CARGO_BIN_NAME")?;
    let message = "`#[ruststream::app]` is in a module, and the crate root has no `main`";
    let label = "this writes `main` in a module, where it does not start the program";
    let note = format!(
        "move `{app}` and its attribute to the crate root, or call it from a `main` there: `fn main() {{ ruststream::run_main(path::to::{app}) }}`"
    );
    Some(quote! {
        #[allow(dead_code, non_camel_case_types, unused_imports)]
        const _: () = {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait __ruststream_AppAtTheCrateRoot {}
            // Not offered as a fix: the user cannot name it.
            #[diagnostic::do_not_recommend]
            impl __ruststream_AppAtTheCrateRoot for __ruststream_RootMain {}

            struct __ruststream_RootMain;
            // The stand-in is imported as `main` rather than declared so:
            // rustc lists every item named `main` when the crate has none.
            mod __ruststream_stand_in {
                pub(super) struct __ruststream_NoRootMain;
                pub(super) const NO_ROOT_MAIN: __ruststream_NoRootMain = __ruststream_NoRootMain;
            }
            use __ruststream_stand_in::{__ruststream_NoRootMain, NO_ROOT_MAIN as main};

            struct __ruststream_Probe<T>(T);
            impl __ruststream_Probe<__ruststream_NoRootMain> {
                fn __ruststream_probe(&self) -> __ruststream_NoRootMain {
                    __ruststream_NoRootMain
                }
            }
            trait __ruststream_Found {
                fn __ruststream_probe(&self) -> __ruststream_RootMain {
                    __ruststream_RootMain
                }
            }
            impl<T> __ruststream_Found for __ruststream_Probe<T> {}

            fn __ruststream_at_the_crate_root<T: __ruststream_AppAtTheCrateRoot>(_: T) {}

            fn __ruststream_check() {
                use crate::*;
                __ruststream_at_the_crate_root(__ruststream_Probe(main).__ruststream_probe());
            }
        };
    })
}

/// `#[derive(Outgoing)]`.
pub(crate) fn derive_outgoing(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(error) => return error.to_compile_error(),
    };
    let cx = Ctxt::new();
    let name = parse::outgoing_name(&cx, &input);
    let errors = match (cx.check(), name) {
        (Ok(()), Some(name)) => return outgoing_impl(&input, &name.into_token_stream()),
        (Err(errors), _) => errors,
        // Every check that gives up records why, so this is a bug here.
        (Ok(()), None) => syn::Error::new(
            Span::call_site(),
            "ruststream-macros could not read `#[outgoing]`; please report this",
        ),
    };
    // A placeholder name, so that uses of the type (a publish, a `reply`
    // returning it) raise no second error; the build fails on the errors.
    let placeholder = outgoing_impl(&input, &quote!(""));
    let errors = errors.to_compile_error();
    quote!(#placeholder #errors)
}

/// `impl Outgoing` with `stream` as the `STREAM`.
fn outgoing_impl(input: &DeriveInput, stream: &TokenStream) -> TokenStream {
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::ruststream::__private::Outgoing for #ident #ty_generics #where_clause {
                const STREAM: &'static str = #stream;
            }
        };
    }
}

mod batch;
#[cfg(test)]
mod tests;
