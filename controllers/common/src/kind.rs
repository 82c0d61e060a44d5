//! The one bound of a namespaced kind the controllers read, write, own or watch: their own kinds
//! and the children they own alike.

use std::fmt::Debug;

use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A namespaced kind known at compile time, read and written as JSON, cached and watched
/// across tasks.
pub trait NamespacedKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> NamespacedKind for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}
