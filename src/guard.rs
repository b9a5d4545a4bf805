//! User callbacks on the watcher thread: a panic in one is labelled with the callback it came
//! from and carried to the thread's single exit, which ends the watcher with `Error::Panicked`.
//!
//! A callback's panic is caught where the callback is called, only to name it, and then
//! unwinds on (`resume_unwind`, which does not run the panic hook a second time). Unwinding is
//! safe here: callbacks run before the store changes or after it changed completely, and the
//! locks (parking_lot) do not poison. The thread's top frame (`engine` spawn) turns the payload
//! into the terminal error that every consumer and `wait_until_ready` caller receives.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use crate::error::Error;

/// The payload a labelled callback panic unwinds with.
struct CallbackPanic {
    callback: String,
    message: String,
}

/// Runs the user callback `f`; if it panics, the panic continues labelled with `callback()`.
pub(crate) fn call<T>(callback: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let message = message(payload.as_ref());
            resume_unwind(Box::new(CallbackPanic { callback: callback(), message }))
        }
    }
}

/// The terminal error for a panic that ended a watcher thread.
pub(crate) fn into_error(payload: &(dyn Any + Send)) -> Error {
    match payload.downcast_ref::<CallbackPanic>() {
        Some(p) => Error::Panicked { callback: p.callback.as_str().into(), message: p.message.as_str().into() },
        None => Error::Panicked { callback: "the watcher thread".into(), message: message(payload).into() },
    }
}

/// True when the panic came from a user callback (not a bug of this crate).
pub(crate) fn is_callback(payload: &(dyn Any + Send)) -> bool {
    payload.is::<CallbackPanic>()
}

/// A panic payload's message: `panic!` gives a `&str` or a `String`.
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_panic_is_labelled_with_its_callback_and_message() {
        let payload = catch_unwind(|| call(|| "index \"node\"".to_owned(), || panic!("no node for {}", "p1")))
            .expect_err("the panic goes on");
        assert!(is_callback(payload.as_ref()));
        let e = into_error(payload.as_ref());
        assert_eq!(e.to_string(), "index \"node\" panicked: no node for p1; the watcher has stopped");
        assert!(e.is_terminal());
    }

    #[test]
    fn other_panics_are_the_watcher_threads_own() {
        let payload = catch_unwind(|| panic!("bug")).expect_err("panics");
        assert!(!is_callback(payload.as_ref()));
        assert_eq!(
            into_error(payload.as_ref()).to_string(),
            "the watcher thread panicked: bug; the watcher has stopped"
        );
    }
}
