"""Matplotlib figures: trajectories, fits, identification views, losses, sweeps.

Every function returns the matplotlib `Figure` it drew on; most take an optional
`ax` (or `fig`) to draw into a figure of yours instead. Figures are made without
`pyplot` (so they work headless, whatever the backend, and are not kept alive by
pyplot's registry); nothing here calls `plt.show()`. Save one with
`fig.savefig("name.png")`. matplotlib is imported lazily, on the first call.

The conventions every figure follows: one meaning per style (`STYLES`: truth only
for a known true model; measurements, estimates and fits told apart by line style and
marker, not colour alone); one legend per figure, outside the data; channels with
different units never share an axis; above four channels a grid, and `channels=`
(with `pages`) for a subset or several pages.
"""

from ._bode import bode as bode
from ._comparison import comparison as comparison
from ._eigenvalues import eigenvalues as eigenvalues
from ._layout import pages as pages
from ._loss import loss_history as loss_history
from ._order import order_scan as order_scan
from ._phase import phase_portrait as phase_portrait
from ._residuals import residuals as residuals
from ._singular_values import singular_values as singular_values
from ._step import step_response as step_response
from ._style import MODEL_CYCLE as MODEL_CYCLE, STYLES as STYLES
from ._sweep import sweep as sweep
from ._trajectory import trajectory as trajectory
