"""The comparisons of the sharded-table tests (tests/client/sharded_tables_test.py,
sharded_keyed_tables_test.py): a replica's answer against the unsharded server's.

A test case mixes in ReplicaAnswers and sets `clients`, its module's dict of a server's name to
its Client, in which "whole" is the server holding the whole table.
"""

from tensorcompute import TensorComputeError


class ReplicaAnswers:
    clients = {}

    def same(self, got, want, what):
        """The same dtype, shape and bytes."""
        self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape), what)
        self.assertEqual(got.tobytes(), want.tobytes(), what)

    def both(self, replica, method, *args, **kwargs):
        """The replica's answer and the unsharded server's, or their errors."""
        answers = []
        for name in (replica, "whole"):
            try:
                answers.append(getattr(self.clients[name], method)(*args, **kwargs))
            except TensorComputeError as e:
                answers.append((e.code, e.message))
        return answers
