from edgepipe.core.backoff import Backoff
from edgepipe.lm.remote.circuit import CLOSED, HALF_OPEN, OPEN, REFUSED, EngineCircuit
from edgepipe.lm.remote.errors import EngineConfigError, EngineRequestError, EngineUnavailable

URL = "http://127.0.0.1:9/v1"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def down(retry_after_s: float | None = None) -> EngineUnavailable:
    return EngineUnavailable("down", url=URL, cause="refused", retry_after_s=retry_after_s)


def test_a_failure_opens_it_one_request_tries_after_the_backoff_and_a_success_closes_it() -> None:
    clock = Clock()
    circuit = EngineCircuit(Backoff(1.0, 60.0), clock)
    assert circuit.allows()
    circuit.failed(down())
    assert (circuit.state, circuit.cause, circuit.opened) == (OPEN, "refused", 1)
    assert not circuit.allows()
    clock.t += 1.0
    assert circuit.allows()  # the one trial
    assert circuit.state == HALF_OPEN
    assert not circuit.allows()  # none beside it
    circuit.failed(down())  # it failed: open again, twice as long
    assert circuit.retry_in_s() == 2.0
    assert circuit.opened == 1  # still the same outage
    clock.t += 2.0
    assert circuit.allows()
    circuit.succeeded()
    assert (circuit.state, circuit.cause) == (CLOSED, "")
    assert circuit.backoff.peek() == 1.0


def test_retry_after_is_honoured_when_longer_than_the_backoff() -> None:
    clock = Clock()
    circuit = EngineCircuit(Backoff(1.0, 60.0), clock)
    circuit.failed(down(retry_after_s=7.0))
    assert circuit.retry_in_s() == 7.0
    clock.t += 6.9
    assert not circuit.allows()
    clock.t += 0.1
    assert circuit.allows()


def test_a_configuration_error_is_never_retried_and_a_bad_request_changes_nothing() -> None:
    clock = Clock()
    circuit = EngineCircuit(Backoff(1.0, 60.0), clock)
    circuit.failed(EngineRequestError("400", url=URL, cause="context"))
    assert circuit.state == CLOSED
    circuit.failed(EngineConfigError("401", url=URL, cause="unauthorized"))
    clock.t += 3600
    assert (circuit.state, circuit.allows(), circuit.opened) == (REFUSED, False, 0)


def test_a_trial_that_was_abandoned_lets_the_next_request_try() -> None:
    clock = Clock()
    circuit = EngineCircuit(Backoff(1.0, 60.0), clock)
    circuit.failed(down())
    clock.t += 1.0
    assert circuit.allows()
    circuit.abandoned()
    assert circuit.allows()
