//! Condition types and reasons written on CapabilityBinding and RouteQualifier status.

/// The `Accepted` condition: whether the spec validated and the object takes effect.
pub mod accepted {
    /// The condition type.
    pub const TYPE: &str = "Accepted";
    /// True: the spec parsed and validated.
    pub const VALIDATED: &str = "Validated";
    /// False: validation failed; the message carries the path-qualified errors.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    /// False: a RouteQualifier beyond the 32 that take effect.
    pub const LIMIT_EXCEEDED: &str = "LimitExceeded";
    /// False: a RouteQualifier whose merge with others is contradictory; names the others.
    pub const CONFLICT: &str = "Conflict";
}

/// The `Composed` condition: whether the last composition could use everything the binding
/// declares.
pub mod composed {
    /// The condition type.
    pub const TYPE: &str = "Composed";
    /// True: every declared endpoint, tool and knowledge source was usable.
    pub const COMPOSED: &str = "Composed";
    /// False: an endpoint was refused or unreachable, a declared tool is missing, a name was
    /// already taken, or every knowledge source was lost.
    pub const COMPOSITION_DEGRADED: &str = "CompositionDegraded";
    /// Unknown: the binding has not been probed yet, or probing is off.
    pub const NOT_PROBED: &str = "NotProbed";
    /// False: the spec is not accepted, so nothing of it is composed.
    pub const NOT_ACCEPTED: &str = "NotAccepted";
}
