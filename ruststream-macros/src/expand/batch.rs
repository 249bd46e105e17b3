//! What `#[subscriber(.., batch(max = n, wait = d))]` writes: the
//! `Subscriber` methods of a batch handler, the `.batch(..)` of its
//! subscription, and its words in the subscriber's doc line.
//!
//! The batch handler's payload type and return type are named with the
//! user's own tokens (`decode_payload::<T>`, `<R as IntoBatchSettle>`), so a
//! type that cannot be decoded or cannot settle a batch is reported on that
//! type, as for a single handler.

use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};
use syn::Type;

use super::{SubscriberFn, context_ident, decode_payload_fn, duration_tokens, local, trait_fn_on};
use crate::parse::{BatchArgs, Handler};

impl SubscriberFn {
    /// `handle` (which a batch subscriber never runs) and `handle_batch`:
    /// decode every payload (`elem` from JSON, or the raw bytes when
    /// `raw`), call the handler with the values that decoded (as `&[T]`
    /// when `lent`), settle the batch as it returned. Also the
    /// `decode_payload` helper, if the payloads are decoded.
    pub(super) fn batch_methods(
        &self,
        handler: &Handler,
        elem: &Type,
        lent: bool,
        raw: bool,
    ) -> (Option<TokenStream>, TokenStream) {
        let name = &self.name;
        let ctx = context_ident();
        let batch = local("batch");
        let values = local("values");
        let payload = local("payload");
        let out = local("out");
        let decode = if raw {
            quote! {
                |#payload: &[u8]| ::core::result::Result::<
                    ::std::vec::Vec<u8>,
                    ::std::string::String,
                >::Ok(::std::vec::Vec::from(#payload))
            }
        } else {
            // Called in a closure, not passed as a function: a `T` that is
            // not `Deserialize` is then reported once, on `T`.
            quote!(|#payload: &[u8]| decode_payload::<#elem>(#payload))
        };
        let argument = if lent {
            quote!(&#values)
        } else {
            quote!(#values)
        };
        let call = quote!(#name::handler(#argument).await);
        let settle = match &handler.output {
            Some(ty) => {
                let into = trait_fn_on(ty, &quote!(IntoBatchSettle), &quote!(into_batch_settle));
                quote! {
                    let #out = #call;
                    #batch.settle(#into(#out));
                }
            }
            None => quote! {
                #batch.settle(::ruststream::__private::IntoBatchSettle::into_batch_settle(#call));
            },
        };
        let future = self.future_type();
        // Spanned on the function's `async`, as `handle`'s (see
        // `handle_body`): a handler whose future is not `Send` is reported
        // there.
        let batch_future = quote_spanned! {self.async_span()=>
            impl ::core::future::Future<Output = ()> + ::core::marker::Send + 'a
        };
        let body = quote_spanned! {self.async_span()=>
            async move {
                let #values = #batch.decode(#decode);
                // Every payload failed to decode: each is dead-lettered,
                // and the handler has nothing to run on.
                if #values.is_empty() {
                    return;
                }
                #settle
            }
        };
        let methods = quote! {
            fn handle<'a>(
                &'a self,
                #ctx: &'a mut ::ruststream::__private::Context<'_>,
            ) -> #future {
                let _ = #ctx;
                async {
                    ::ruststream::__private::Settle::Failed(::std::string::String::from(
                        "a batch subscriber handles its entries in batches (`handle_batch`), not one at a time",
                    ))
                }
            }

            fn handle_batch<'a>(
                &'a self,
                #batch: &'a mut ::ruststream::__private::EntryBatch,
            ) -> #batch_future {
                #body
            }
        };
        ((!raw).then(decode_payload_fn), methods)
    }
}

/// `.batch(Batch::new(max, wait))`, from the checked literals.
pub(super) fn batch_option(batch: &BatchArgs) -> TokenStream {
    let max = Literal::u64_unsuffixed(batch.max);
    let wait = duration_tokens(batch.wait);
    quote!(.batch(::ruststream::__private::Batch::new(#max, #wait)))
}

/// The doc line's words for the batches: ", in batches of up to 500
/// entries gathered for at most 10ms".
pub(super) fn doc_words(batch: &BatchArgs) -> String {
    format!(
        ", in batches of up to {} entries gathered for at most {:?}",
        batch.max, batch.wait
    )
}
