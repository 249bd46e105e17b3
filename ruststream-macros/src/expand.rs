//! Code generation for the three macros.
//!
//! Paths are absolute (`::ruststream::__private::..`), so the generated code
//! works whatever the user imported. Impls go in `const _: () = { .. };` so
//! that their helper items pollute nothing. Bindings of generated code are
//! prefixed `__ruststream_` (and mixed-site), so a user's constant named
//! `payload` or `ctx` cannot turn a binding into a pattern match.
//!
//! Type checks are spanned on the user's own type, as in axum-macros'
//! `#[debug_handler]`: the payload is decoded with `decode_payload::<T>`
//! where the `T` tokens are the user's, and the return value is settled
//! through `<R as IntoSettle>::into_settle` or `reply::<R>`, so a payload
//! that is not `Deserialize` or a return type that cannot settle an entry
//! is reported on that type, once, instead of on the attribute. (A separate
//! assertion beside each call would report the same mistake twice.)

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{DeriveInput, Ident, ItemFn, Type};

use crate::ctxt::Ctxt;
use crate::parse::{self, Handler, Payload, SubscriberArgs, Workers};

/// `#[subscriber(..)]`.
pub(crate) fn subscriber(attr: TokenStream, item: TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    let args = match syn::parse2::<SubscriberArgs>(attr) {
        Ok(args) => Some(args),
        Err(error) => {
            cx.syn_error(error);
            None
        }
    };
    let Ok(function) = syn::parse2::<ItemFn>(item.clone()) else {
        cx.error_at(
            Span::call_site(),
            "`#[subscriber]` goes on an `async fn` that handles one entry, e.g. `async fn post_payment(payment: &Payment) -> HandlerOutcome`",
        );
        return original_with_errors(item, cx);
    };
    let handler = Handler::from_fn(&cx, &function, args.as_ref().map(|a| a.reply.is_some()));
    match (cx.check(), args, handler) {
        (Ok(()), Some(args), Some(handler)) => expand_subscriber(args, function, handler),
        (checked, ..) => {
            let errors = checked.err().map(|e| e.to_compile_error());
            // The function as written, so that the IDE still knows it; it is
            // used nowhere while the attribute is wrong.
            quote! {
                #[allow(dead_code)]
                #function
                #errors
            }
        }
    }
}

/// The item as written, followed by the errors: on a mistake the user
/// sees the errors and the IDE keeps seeing the item.
fn original_with_errors(item: TokenStream, cx: Ctxt) -> TokenStream {
    let errors = cx.check().err().map(|e| e.to_compile_error());
    quote!(#item #errors)
}

fn expand_subscriber(args: SubscriberArgs, function: ItemFn, handler: Handler) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = function;
    let name = sig.ident.clone();
    let async_span = sig
        .asyncness
        .map_or_else(Span::call_site, |token| token.span);
    let name_str = name.unraw().to_string();

    // Docs describe the subscriber, so they go on the struct; `#[cfg]` goes
    // on every item; anything else (lints, `#[tracing::instrument]`, ..)
    // belongs to the function and stays on it.
    let mut docs = Vec::new();
    let mut cfgs = Vec::new();
    let mut fn_attrs = Vec::new();
    for attr in attrs {
        if attr.path().is_ident("doc") {
            docs.push(attr);
        } else if attr.path().is_ident("cfg") {
            cfgs.push(attr);
        } else {
            fn_attrs.push(attr);
        }
    }
    sig.ident = Ident::new("handler", name.span());

    let SubscriberArgs {
        descriptor,
        workers,
        reply,
        max_deliveries,
        prefetch,
    } = args;
    let workers = workers.map(|Workers { count, by_key }| {
        let n = count.expr;
        let by_key = by_key.then(|| quote!(.by_key()));
        quote!(.workers(#n) #by_key)
    });
    let max_deliveries = max_deliveries.map(|m| {
        let n = m.expr;
        quote!(.max_deliveries(#n))
    });
    let prefetch = prefetch.map(|p| {
        let n = p.expr;
        quote!(.prefetch(#n))
    });
    let replies = reply.is_some();

    // Bindings are patterns, and a pattern naming a constant in scope
    // matches it instead of binding: hygiene does not help there (items
    // resolve at the call site), so the names are ones no user writes.
    let local = |name: &str| Ident::new(&format!("__ruststream_{name}"), Span::mixed_site());
    let ctx = local("ctx");
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
        Payload::RawVec => (quote!(), quote!(::std::vec::Vec::from(#ctx.payload()))),
    };
    // The bound is on `Deserialize` itself rather than `DeserializeOwned`,
    // so that a payload type without it gets serde's hint to derive it.
    let decode_payload = match &handler.payload {
        Payload::Borrowed(_) | Payload::Owned(_) => Some(quote! {
            fn decode_payload<T>(
                #payload: &[u8],
            ) -> ::core::result::Result<T, ::std::string::String>
            where
                T: for<'de> ::ruststream::__private::serde::Deserialize<'de>,
            {
                ::ruststream::__private::decode::<T>(#payload)
            }
        }),
        Payload::RawSlice | Payload::RawVec => None,
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
            let into_settle = if nameable(ty) {
                quote_spanned!(ty.span()=> <#ty as ::ruststream::__private::IntoSettle>::into_settle)
            } else {
                quote_spanned!(ty.span()=> ::ruststream::__private::IntoSettle::into_settle)
            };
            quote! {
                let #out = #call;
                #into_settle(#out)
            }
        }
        // Checked in parse: a `reply` subscriber has a return type.
        (None, _) => quote!(::ruststream::__private::IntoSettle::into_settle(#call)),
    };

    // Spanned on the function's `async`: a handler whose future is not
    // `Send` is reported there, with rustc's notes on what is held across
    // which `.await`.
    let body = quote_spanned! {async_span=>
        async move {
            #decode
            #settle
        }
    };
    let future = quote_spanned! {async_span=>
        impl ::core::future::Future<Output = ::ruststream::__private::Settle>
            + ::core::marker::Send
            + 'a
    };
    let line = quote_spanned!(Span::call_site()=> ::core::line!());

    quote! {
        #(#docs)*
        #(#cfgs)*
        #[allow(non_camel_case_types)]
        #[derive(
            ::core::clone::Clone,
            ::core::marker::Copy,
            ::core::fmt::Debug,
            ::core::default::Default,
        )]
        #vis struct #name;

        #(#cfgs)*
        const _: () = {
            impl #name {
                /// The handler as written; call it directly in unit tests.
                // `#[subscriber]` requires `async` even where nothing is awaited.
                #[allow(clippy::unused_async)]
                #(#fn_attrs)*
                #vis #sig #block
            }

            const INFO: ::ruststream::__private::SubscriberInfo =
                ::ruststream::__private::SubscriberInfo {
                    name: #name_str,
                    module: ::core::module_path!(),
                    file: ::core::file!(),
                    line: #line,
                };

            #[automatically_derived]
            impl ::ruststream::__private::Subscriber for #name {
                fn info(&self) -> ::ruststream::__private::SubscriberInfo {
                    INFO
                }

                fn subscription(&self) -> ::ruststream::__private::Subscription {
                    ::ruststream::__private::Subscription::new(#descriptor)
                        #workers
                        #max_deliveries
                        #prefetch
                }

                fn replies(&self) -> bool {
                    #replies
                }

                fn handle<'a>(
                    &'a self,
                    #ctx: &'a mut ::ruststream::__private::Context<'_>,
                ) -> #future {
                    #body
                }
            }

            #decode_payload

            fn subscription() -> ::ruststream::__private::Subscription {
                ::ruststream::__private::Subscriber::subscription(&#name)
            }

            ::ruststream::__private::inventory::submit! {
                ::ruststream::__private::Registration { info: INFO, subscription }
            }
        };
    }
}

/// Whether `ty` can be written in a qualified path (`<ty as Trait>`):
/// an `impl Trait` return type cannot.
fn nameable(ty: &Type) -> bool {
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
        return original_with_errors(item, cx);
    };
    parse::check_app_fn(&cx, attr, &function);
    if let Err(errors) = cx.check() {
        let errors = errors.to_compile_error();
        return quote!(#function #errors);
    }
    let name = &function.sig.ident;
    quote! {
        #function

        /// Runs the app built by the `#[ruststream::app]` function until
        /// SIGINT or SIGTERM.
        #[allow(dead_code)]
        fn main() {
            ::ruststream::__private::run_main(#name)
        }
    }
}

/// `#[derive(Outgoing)]`.
pub(crate) fn derive_outgoing(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(error) => return error.to_compile_error(),
    };
    let cx = Ctxt::new();
    let name = parse::outgoing_name(&cx, &input);
    if let Err(errors) = cx.check() {
        return errors.to_compile_error();
    }
    let Some(name) = name else {
        return quote!();
    };
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::ruststream::__private::Outgoing for #ident #ty_generics #where_clause {
                const STREAM: &'static str = #name;
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn file(tokens: TokenStream) -> syn::File {
        syn::parse2(tokens).expect("the expansion is valid Rust")
    }

    fn compile_errors(file: &syn::File) -> usize {
        file.to_token_stream()
            .to_string()
            .matches("compile_error")
            .count()
    }

    #[test]
    fn a_subscriber_becomes_a_struct_with_its_impls() {
        let out = file(subscriber(
            quote!(
                RedisStream::new("payments").group("ledger"),
                workers(8, by_key),
                prefetch(16)
            ),
            quote! {
                /// Posts payments.
                pub async fn post_payment(payment: &Payment, ctx: &mut Context<'_>) -> HandlerOutcome {
                    HandlerOutcome::ack()
                }
            },
        ));
        assert_eq!(compile_errors(&out), 0);
        let syn::Item::Struct(item) = &out.items[0] else {
            panic!("a struct first: {:?}", out.items[0]);
        };
        assert_eq!(item.ident, "post_payment");
        assert!(item.attrs.iter().any(|a| a.path().is_ident("doc")));
        let text = out.to_token_stream().to_string();
        for expected in [
            "impl :: ruststream :: __private :: Subscriber for post_payment",
            "async fn handler (payment : & Payment , ctx : & mut Context < '_ >)",
            ". workers (8) . by_key ()",
            ". prefetch (16)",
            "decode_payload :: < Payment >",
            "< HandlerOutcome as :: ruststream :: __private :: IntoSettle > :: into_settle",
            "inventory :: submit !",
        ] {
            assert!(text.contains(expected), "{expected:?} not in {text}");
        }
    }

    #[test]
    fn a_raw_reply_subscriber_neither_decodes_nor_settles() {
        let text = subscriber(
            quote!(RedisStream::new("raw").group("echo"), reply),
            quote!(
                async fn echo(bytes: Vec<u8>) -> Echo {
                    Echo(bytes)
                }
            ),
        )
        .to_string();
        assert!(!text.contains("decode_payload"), "{text}");
        assert!(text.contains("reply :: < Echo >"), "{text}");
        assert!(text.contains(":: std :: vec :: Vec :: from"), "{text}");
        assert!(
            text.contains("fn replies (& self) -> bool { true }"),
            "{text}"
        );
    }

    #[test]
    fn on_a_mistake_the_function_stays_as_written() {
        let out = file(subscriber(
            quote!(RedisStream::new("payments"), workers(0)),
            quote!(
                fn post_payment(payment: &Payment) {}
            ),
        ));
        let syn::Item::Fn(function) = &out.items[0] else {
            panic!("the function first: {:?}", out.items[0]);
        };
        assert_eq!(function.sig.ident, "post_payment");
        // No group, workers(0), not async: three errors, all at once.
        assert_eq!(compile_errors(&out), 3);
    }

    #[test]
    fn the_app_function_gets_a_main() {
        let out = file(app(
            quote!(),
            quote!(
                fn build() -> impl App {
                    RustStream::new(AppInfo::new("app", "1"))
                }
            ),
        ));
        let names: Vec<String> = out
            .items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["build", "main"]);
        assert!(
            out.to_token_stream()
                .to_string()
                .contains("run_main (build)")
        );
    }

    #[test]
    fn outgoing_keeps_the_generics() {
        let text = derive_outgoing(quote! {
            #[outgoing(name = "envelopes")]
            struct Envelope<'a, T: Clone> where T: Send { body: &'a T }
        })
        .to_string();
        assert!(
            text.contains(
                "impl < 'a , T : Clone > :: ruststream :: __private :: Outgoing for Envelope < 'a , T > where T : Send"
            ),
            "{text}"
        );
        assert!(
            text.contains("const STREAM : & 'static str = \"envelopes\""),
            "{text}"
        );
    }
}
