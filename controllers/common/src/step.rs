//! Where a step of a reconcile got: ready with its value, or stopped for one of three reasons
//! the user reads in the object's status. Every controller's steps answer with a [`Step`]
//! (inside the `Result` of the API requests they make), and [`ready!`](crate::ready) goes on
//! with the value or hands the stop back to the caller.

use visitors_api::InvalidSpec;
use visitors_api::conditions::REASON_INVALID_SPEC;

/// How a step of a reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Step<T> {
    /// Done: the reconcile goes on with the value.
    Ready(T),
    /// Waits for something outside the object, which another controller or a person brings
    /// (an object to appear or be fixed, a lock to be released): look again after a backoff.
    Wait(Wait),
    /// Can never go on as it stands: the object ends here, saying why (a restore of a failed
    /// backup is refused).
    Blocked(Blocked),
    /// The spec is invalid: nothing more happens until it changes.
    InvalidSpec(InvalidSpec),
}

/// What a step waits for: a condition reason and a sentence a user can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub reason: &'static str,
    pub message: String,
}

impl Wait {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Wait { reason, message: message.into() }
    }
}

/// Why a step can never go on: a condition reason and a sentence a user can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub reason: &'static str,
    pub message: String,
}

impl Blocked {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Blocked { reason, message: message.into() }
    }
}

impl<T> Step<T> {
    /// A step that waits, for `reason`, saying `message`.
    pub fn wait(reason: &'static str, message: impl Into<String>) -> Self {
        Step::Wait(Wait::new(reason, message))
    }

    /// A step that can never go on, for `reason`, saying `message`.
    pub fn blocked(reason: &'static str, message: impl Into<String>) -> Self {
        Step::Blocked(Blocked::new(reason, message))
    }

    /// The same stop, or the ready value passed through `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Step<U> {
        match self.into_ready() {
            Ok(value) => Step::Ready(f(value)),
            Err(stopped) => stopped,
        }
    }

    /// The ready value, or the stop as a step of any value type.
    pub fn into_ready<U>(self) -> Result<T, Step<U>> {
        match self {
            Step::Ready(value) => Ok(value),
            Step::Wait(wait) => Err(Step::Wait(wait)),
            Step::Blocked(blocked) => Err(Step::Blocked(blocked)),
            Step::InvalidSpec(invalid) => Err(Step::InvalidSpec(invalid)),
        }
    }

    /// The value of a ready step.
    pub fn ready(self) -> Option<T> {
        match self {
            Step::Ready(value) => Some(value),
            _ => None,
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, Step::Ready(_))
    }

    /// Why the step stopped, as a condition's reason and message; `None` when it is ready.
    pub fn stopped_because(&self) -> Option<(&'static str, String)> {
        match self {
            Step::Ready(_) => None,
            Step::Wait(Wait { reason, message }) | Step::Blocked(Blocked { reason, message }) => {
                Some((reason, message.clone()))
            }
            Step::InvalidSpec(invalid) => Some((REASON_INVALID_SPEC, invalid.to_string())),
        }
    }
}

/// The value of a ready [`Step`]; any other step is returned at once, as `Ok(step)`, from the
/// enclosing function, which answers with a `Result<Step<_>, _>` itself.
#[macro_export]
macro_rules! ready {
    ($step:expr) => {
        match $crate::step::Step::into_ready($step) {
            Ok(value) => value,
            Err(stopped) => return Ok(stopped),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(n: u32) -> Step<u32> {
        if n.is_multiple_of(2) { Step::Ready(n / 2) } else { Step::wait("Odd", format!("{n} is odd")) }
    }

    fn quarter(n: u32) -> Result<Step<u32>, ()> {
        let halved = ready!(half(n));
        Ok(half(halved))
    }

    #[test]
    fn ready_goes_on_with_the_value_and_returns_any_stop() {
        assert_eq!(quarter(8), Ok(Step::Ready(2)));
        assert_eq!(quarter(6), Ok(Step::wait("Odd", "3 is odd")), "the second half waits");
        assert_eq!(quarter(5), Ok(Step::wait("Odd", "5 is odd")), "the first half waits and returns");
    }

    #[test]
    fn a_stop_keeps_its_kind_and_words_through_map() {
        let blocked: Step<u32> = Step::blocked("BackupFailed", "never restored");
        assert_eq!(blocked.map(|n| n.to_string()), Step::blocked("BackupFailed", "never restored"));
        assert_eq!(Step::Ready(2).map(|n: u32| n + 1), Step::Ready(3));
        assert!(!Step::<u32>::wait("A", "b").is_ready());
        assert_eq!(Step::<u32>::blocked("A", "b").stopped_because(), Some(("A", "b".to_string())));
        assert_eq!(Step::Ready(1).stopped_because(), None);
    }
}
