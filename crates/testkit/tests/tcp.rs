//! The conformance suite against the TCP backend (loopback).
accio_testkit::conformance_suite!(tcp, accio_testkit::Backend::tcp());
