//! Unit tests of the code written by `expand.rs`.

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

/// What `#[ruststream::app]` (no arguments) writes for `item`.
fn app_of(item: TokenStream) -> syn::File {
    file(app(quote!(), item))
}

/// The names of the functions at the top level of `file`, in order.
fn fn_names(file: &syn::File) -> Vec<String> {
    file.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// The doc comments of an item, one line each.
fn docs(attrs: &[syn::Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter_map(|attr| match &attr.meta {
            syn::Meta::NameValue(doc) if doc.path.is_ident("doc") => match &doc.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(line),
                    ..
                }) => Some(line.value()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The `handler` written in an `impl` block of `out`.
fn handler_of(out: &syn::File) -> &syn::ImplItemFn {
    out.items
        .iter()
        .find_map(|item| {
            let syn::Item::Const(konst) = item else {
                return None;
            };
            let syn::Expr::Block(block) = &*konst.expr else {
                return None;
            };
            block.block.stmts.iter().find_map(|stmt| match stmt {
                syn::Stmt::Item(syn::Item::Impl(imp)) if imp.trait_.is_none() => {
                    imp.items.iter().find_map(|item| match item {
                        syn::ImplItem::Fn(f) if f.sig.ident == "handler" => Some(f),
                        _ => None,
                    })
                }
                _ => None,
            })
        })
        .expect("a handler")
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
            ///
            /// # Errors
            ///
            /// When the ledger is down.
            pub async fn post_payment(payment: &Payment, ctx: &mut Context<'_>) -> Result<(), String> {
                Ok(())
            }
        },
    ));
    assert_eq!(compile_errors(&out), 0);
    let syn::Item::Struct(item) = &out.items[0] else {
        panic!("a struct first: {:?}", out.items[0]);
    };
    assert_eq!(item.ident, "post_payment");
    assert_eq!(
        docs(&item.attrs),
        [
            " Posts payments.",
            "",
            " # Errors",
            "",
            " When the ledger is down.",
            "",
            "# Subscription",
            "",
            "Reads stream `payments` as consumer group `ledger`: new entries, on 8 workers, in order per partition key.",
        ]
    );
    // The handler keeps the user's docs, `# Errors` included, for the
    // lints that read them.
    assert_eq!(
        docs(&handler_of(&out).attrs),
        [
            " Posts payments.",
            "",
            " # Errors",
            "",
            " When the ledger is down.",
        ]
    );
    let text = out.to_token_stream().to_string();
    for expected in [
        "impl :: ruststream :: __private :: Subscriber for post_payment",
        "async fn handler (payment : & Payment , ctx : & mut Context < '_ >)",
        "fn handle < 'a > (& 'a self , ctx : & 'a mut :: ruststream :: __private :: Context < '_ > ,)",
        ". workers (8) . by_key ()",
        ". prefetch (16)",
        "decode_payload :: < Payment >",
        "< Result < () , String > as :: ruststream :: __private :: IntoSettle > :: into_settle",
        "inventory :: submit !",
    ] {
        assert!(text.contains(expected), "{expected:?} not in {text}");
    }
}

#[test]
fn the_doc_line_says_what_is_read() {
    let line = |args: TokenStream| {
        let cx = Ctxt::new();
        let args = parse::subscriber_args(&cx, args);
        cx.check().expect("no errors");
        doc_line(&args.expect("arguments")).expect("a doc line")
    };
    assert_eq!(
        line(quote!(
            RedisStream::claiming("payments", MIN_IDLE).group("ledger"),
            workers(4)
        )),
        "Reads stream `payments` as consumer group `ledger`: pending entries idle for `MIN_IDLE`, then new ones, on 4 workers."
    );
    assert_eq!(
        line(quote!(
            Stream::reclaim(STREAM, Duration::from_secs(30)).group(GROUP)
        )),
        "Reads stream `STREAM` as consumer group `GROUP`: pending entries idle for `Duration::from_secs(30)` only, on 1 worker."
    );
    assert_eq!(
        line(quote!(RedisStream::new("s").group("g"), workers(N, by_key))),
        "Reads stream `s` as consumer group `g`: new entries, on `N` workers, in order per partition key."
    );
}

#[test]
fn an_undocumented_handler_gets_a_doc_line() {
    let out = file(subscriber(
        quote!(RedisStream::new("s").group("g")),
        quote!(
            async fn f(_: &P) {}
        ),
    ));
    assert_eq!(
        docs(&handler_of(&out).attrs),
        ["The handler as written; call it directly in unit tests."]
    );
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
fn on_a_mistake_the_subscriber_is_stubbed() {
    let out = file(subscriber(
        quote!(RedisStream::new("payments"), workers(0)),
        quote!(
            /// Posts payments.
            fn post_payment(payment: &Payment) {}
        ),
    ));
    // No group, workers(0), not async: three errors, all at once.
    assert_eq!(compile_errors(&out), 3);
    // The struct, its handler (made `async`, as callers await it) and a
    // `Subscriber` impl, so that the app using it raises no more errors.
    let syn::Item::Struct(item) = &out.items[0] else {
        panic!("a struct first: {:?}", out.items[0]);
    };
    assert_eq!(item.ident, "post_payment");
    assert_eq!(docs(&item.attrs), [" Posts payments."]);
    let handler = handler_of(&out);
    assert!(handler.sig.asyncness.is_some());
    assert_eq!(docs(&handler.attrs), [" Posts payments."]);
    let text = out.to_token_stream().to_string();
    assert!(
        text.contains("impl :: ruststream :: __private :: Subscriber for post_payment"),
        "{text}"
    );
    assert!(text.contains(":: core :: unreachable ! ()"), "{text}");
    // Never registered: it cannot run.
    assert!(!text.contains("inventory"), "{text}");
}

#[test]
fn a_method_stays_as_written() {
    let method = subscriber(
        quote!(RedisStream::new("payments").group("ledger")),
        quote!(
            async fn post(&self, payment: &Payment) {}
        ),
    );
    let out = file(quote! {
        impl Ledger {
            #method
        }
    });
    let syn::Item::Impl(block) = &out.items[0] else {
        panic!("an impl block: {:?}", out.items[0]);
    };
    // The method and the error; no struct, which cannot be in an impl.
    assert!(matches!(&block.items[0], syn::ImplItem::Fn(f) if f.sig.ident == "post"));
    assert!(matches!(&block.items[1], syn::ImplItem::Macro(_)));
    assert_eq!(block.items.len(), 2);
}

#[test]
fn a_second_subscriber_attribute_is_dropped() {
    let out = file(subscriber(
        quote!(RedisStream::new("payments").group("ledger")),
        quote!(
            #[subscriber(RedisStream::new("payments").group("audit"))]
            async fn post_payment(payment: &Payment) {}
        ),
    ));
    assert_eq!(compile_errors(&out), 1);
    let handler = handler_of(&out);
    assert!(
        !handler
            .attrs
            .iter()
            .any(|a| a.path().is_ident("subscriber")),
        "{:?}",
        handler.attrs
    );
}

#[test]
fn a_parameter_named_like_its_function_binds_in_the_stand_in() {
    let out = subscriber(
        quote!(RedisStream::new("payments").group("ledger")),
        quote!(
            async fn payment(payment: &Payment) {}
        ),
    )
    .to_string();
    assert!(out.contains("fn payment () { }"), "{out}");
    assert_eq!(out.matches("compile_error").count(), 1, "{out}");
}

#[test]
fn the_app_function_gets_a_main() {
    let out = app_of(quote!(
        fn build() -> impl App {
            RustStream::new(AppInfo::new("app", "1"))
        }
    ));
    assert_eq!(fn_names(&out), ["build", "main"]);
    assert!(
        out.to_token_stream()
            .to_string()
            .contains("run_main (build)")
    );
}

#[test]
fn a_wrong_app_function_still_gets_a_main() {
    let out = app_of(quote!(
        async fn build() -> impl App {
            RustStream::new(AppInfo::new("app", "1"))
        }
    ));
    assert_eq!(fn_names(&out), ["build", "main"]);
    assert_eq!(compile_errors(&out), 1);

    // An app function named `main` gets no second one.
    let out = app_of(quote!(
        fn main() -> impl App {
            RustStream::new(AppInfo::new("app", "1"))
        }
    ));
    assert_eq!(out.items.len(), 2, "{:?}", out.items);
}

#[test]
fn outgoing_with_a_mistake_gets_a_placeholder() {
    let text = derive_outgoing(quote! {
        #[outgoing(name = "")]
        struct Payment;
    })
    .to_string();
    assert!(
        text.contains("Outgoing for Payment { const STREAM : & 'static str = \"\" ; }"),
        "{text}"
    );
    assert_eq!(text.matches("compile_error").count(), 1, "{text}");
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
