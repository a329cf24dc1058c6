//! The top-level object shape shared by the three trainer kinds.
//!
//! Like `k8s-openapi`'s types, the objects carry no `apiVersion`/`kind` fields: those are written from constants
//! on serialization and checked on deserialization, so an object can never claim to be something it is not.

/// Declares a trainer kind: the struct, its serde impls and the `k8s-openapi` resource traits (which give it
/// `kube::Resource` through kube's blanket impl, so `kube::Api<TrainJob>` works).
macro_rules! trainer_kind {
    (
        $(#[$meta:meta])*
        kind $name:ident {
            kind: $kind:expr,
            plural: $plural:expr,
            scope: $scope:ty,
            spec: $spec:ty
            $(, status: $status:ty)? $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name {
            /// Standard object metadata.
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// Desired state.
            pub spec: $spec,
            $(
            /// Observed state, written by controllers.
            pub status: Option<$status>,
            )?
        }

        impl $name {
            /// A new object with this name and spec, and no namespace or status.
            pub fn new(name: impl Into<String>, spec: $spec) -> Self {
                Self {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.into()),
                        ..Default::default()
                    },
                    spec,
                    $(status: None::<$status>,)?
                }
            }

            /// The object's name, or `""` when it has none.
            pub fn name(&self) -> &str {
                self.metadata.name.as_deref().unwrap_or_default()
            }
        }

        impl k8s_openapi::Resource for $name {
            const API_VERSION: &'static str = $crate::constants::API_VERSION;
            const GROUP: &'static str = $crate::constants::GROUP;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $crate::constants::VERSION;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }

        impl k8s_openapi::Metadata for $name {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let mut s = serializer.serialize_struct(stringify!($name), 5)?;
                s.serialize_field("apiVersion", $crate::constants::API_VERSION)?;
                s.serialize_field("kind", $kind)?;
                s.serialize_field("metadata", &self.metadata)?;
                s.serialize_field("spec", &self.spec)?;
                $(
                if let Some(status) = &self.status {
                    let status: &$status = status;
                    s.serialize_field("status", status)?;
                }
                )?
                s.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                #[derive(serde::Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Repr {
                    api_version: Option<String>,
                    kind: Option<String>,
                    #[serde(default)]
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                    spec: $spec,
                    $(
                    #[serde(default)]
                    status: Option<$status>,
                    )?
                }
                let repr = Repr::deserialize(deserializer)?;
                if let Some(api_version) = repr.api_version.as_deref() {
                    if api_version != $crate::constants::API_VERSION {
                        return Err(serde::de::Error::custom(format_args!(
                            "apiVersion {api_version:?} is not {:?}",
                            $crate::constants::API_VERSION
                        )));
                    }
                }
                if let Some(kind) = repr.kind.as_deref() {
                    if kind != $kind {
                        return Err(serde::de::Error::custom(format_args!("kind {kind:?} is not {:?}", $kind)));
                    }
                }
                Ok(Self {
                    metadata: repr.metadata,
                    spec: repr.spec,
                    $(status: repr.status as Option<$status>,)?
                })
            }
        }
    };
}

pub(crate) use trainer_kind;
