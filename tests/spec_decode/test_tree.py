import pytest

from hearth.spec_decode.tree import DraftTree


def test_tree_paths_depths_and_top1_chain():
    #      root
    #     /    \
    #    0(5)   2(7)
    #    |      |
    #    1(6)   4(9)
    #    |
    #    3(8)
    t = DraftTree([5, 6, 7, 8, 9], [-1, 0, -1, 1, 2])
    assert t.depths() == [1, 2, 1, 3, 2]
    assert t.path(3) == [0, 1, 3] and t.path(4) == [2, 4]
    assert t.chain() == [5, 6, 8]
    assert not t.is_chain
    c = DraftTree.from_chain([1, 2, 3])
    assert c.is_chain and c.chain() == [1, 2, 3] and c.parents == [-1, 0, 1]


@pytest.mark.parametrize("parents", [[0], [-1, 1], [-2]])
def test_tree_rejects_parents_that_are_not_earlier_nodes(parents):
    with pytest.raises(ValueError, match="parent"):
        DraftTree(list(range(len(parents))), parents)
