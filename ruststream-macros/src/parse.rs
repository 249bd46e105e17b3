//! The macros' inputs as typed values: `#[subscriber(..)]`'s arguments
//! (`args.rs`), the handler's signature (`handler.rs`), `#[outgoing(..)]`
//! and the app function (here).
//!
//! Everything here only reads and checks; `expand.rs` writes the code.
//! Every check records its error in the expansion's one [`Ctxt`] and goes
//! on, so one build reports every mistake, each spanned on the token that
//! is wrong.

mod args;
mod batch;
mod handler;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{
    Attribute, DeriveInput, Expr, ExprLit, ItemFn, Lit, LitStr, ReturnType, Signature, Token, token,
};

use crate::ctxt::Ctxt;

pub(crate) use args::{Count, Mode, SubscriberArgs, Workers, subscriber_args};
pub(crate) use batch::BatchArgs;
pub(crate) use handler::{Handler, Payload, is_method, is_subscriber_attr, param_named_like_fn};

/// Tokens as code in a message or a doc, without the spaces
/// `TokenStream::to_string` puts between every two tokens (`Vec<u8>`, not
/// `Vec < u8 >`).
pub(crate) fn code(tokens: impl ToTokens) -> String {
    fn write(out: &mut String, tokens: TokenStream) {
        // Words (identifiers and literals) need a space between them;
        // punctuation does not, except after a comma and around `+`, `=`.
        // A bracket after a lifetime or a keyword is not a call or an
        // index: `&'a [u8]`, `&mut [u8]`.
        let mut after_word = false;
        let mut before_bracket = false;
        let mut after_quote = false;
        for tree in tokens {
            match tree {
                TokenTree::Ident(ident) => {
                    if after_word {
                        out.push(' ');
                    }
                    let word = ident.to_string();
                    before_bracket =
                        after_quote || matches!(word.as_str(), "mut" | "dyn" | "impl" | "const");
                    out.push_str(&word);
                    after_word = true;
                    after_quote = false;
                }
                TokenTree::Literal(literal) => {
                    if after_word {
                        out.push(' ');
                    }
                    out.push_str(&literal.to_string());
                    after_word = true;
                    before_bracket = false;
                }
                TokenTree::Punct(punct) => {
                    after_quote = punct.as_char() == '\'';
                    before_bracket = false;
                    match punct.as_char() {
                        c @ ('+' | '=') => {
                            out.push(' ');
                            out.push(c);
                            out.push(' ');
                        }
                        ',' => out.push_str(", "),
                        c => out.push(c),
                    }
                    after_word = false;
                }
                TokenTree::Group(group) => {
                    let (open, close) = match group.delimiter() {
                        proc_macro2::Delimiter::Parenthesis => ("(", ")"),
                        proc_macro2::Delimiter::Bracket => ("[", "]"),
                        proc_macro2::Delimiter::Brace => ("{ ", " }"),
                        proc_macro2::Delimiter::None => ("", ""),
                    };
                    if before_bracket {
                        out.push(' ');
                    }
                    out.push_str(open);
                    write(out, group.stream());
                    out.push_str(close);
                    after_word = false;
                    before_bracket = false;
                }
            }
        }
    }
    let mut out = String::new();
    write(&mut out, tokens.into_token_stream());
    out.trim_end().to_owned()
}

/// Errors for `const`, `unsafe`, `extern` and variadics, which no function
/// the macros take may have.
pub(super) fn check_plain_fn(cx: &Ctxt, sig: &Signature, what: &str) {
    if let Some(token) = &sig.constness {
        cx.error_spanned_by(token, format!("{what} cannot be a `const fn`"));
    }
    if let Some(token) = &sig.unsafety {
        cx.error_spanned_by(token, format!("{what} cannot be `unsafe`"));
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(abi, format!("{what} cannot be `extern`"));
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, format!("{what} cannot be variadic"));
    }
}

/// Errors for generics and `where` clauses, which no function the macros
/// take may have.
pub(super) fn check_generics(cx: &Ctxt, sig: &Signature, what: &str, why_not_generic: &str) {
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            format!("{what} cannot be generic: {why_not_generic}"),
        );
    } else if let Some(where_clause) = &sig.generics.where_clause {
        cx.error_spanned_by(where_clause, format!("{what} cannot have a `where` clause"));
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
    check_plain_fn(cx, sig, "the app function");
    check_generics(
        cx,
        sig,
        "the app function",
        "the generated `main` calls it as it is",
    );
    if let Some(token) = &sig.asyncness {
        cx.error_spanned_by(
            token,
            "the app function cannot be `async`: it only builds the app, which the generated `main` runs on a tokio runtime (to build it asynchronously, write `main` yourself with `ruststream::run_main_with`)",
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
