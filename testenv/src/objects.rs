//! Creating the API objects testenv needs, leaving the ones that exist alone.

use kube::Api;
use kube::api::PostParams;

use crate::Error;

/// Creates `object` unless an object of that name exists.
pub(crate) async fn create_if_missing<K>(api: &Api<K>, object: K) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(error) => Err(error.into()),
    }
}
