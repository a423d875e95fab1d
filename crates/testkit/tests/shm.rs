//! The conformance suite against the shared-memory backend.
accio_testkit::conformance_suite!(shm, accio_testkit::Backend::shm());
