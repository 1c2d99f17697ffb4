set terminal svg size 1400,650 dynamic background rgb 'white'
set output 'pareto_resnet-152_32.svg'
set title 'resnet-152, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_resnet-152_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (6009 MiB, 42.5 ms)', 'pareto_resnet-152_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (2569 MiB, 107.6 ms)', 'pareto_resnet-152_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (5972 MiB, 39.4 ms)', 'pareto_resnet-152_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (5972 MiB, 36.3 ms)', 'pareto_resnet-152_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (2530 MiB, 43.1 ms)', 'pareto_resnet-152_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (2527 MiB, 41.6 ms)', 'pareto_resnet-152_32.dat' index 6 using 3:2 with points pt 7 ps 1.6 lc rgb '#e377c2' title 'mutwo sweep-90 (5338 MiB, 39.6 ms)', 'pareto_resnet-152_32.dat' index 7 using 3:2 with points pt 7 ps 1.6 lc rgb '#7f7f7f' title 'mutwo sweep-75 (4444 MiB, 40.8 ms)', 'pareto_resnet-152_32.dat' index 8 using 3:2 with points pt 7 ps 1.6 lc rgb '#bcbd22' title 'mutwo sweep-60 (3554 MiB, 42.3 ms)', 'pareto_resnet-152_32.dat' index 9 using 3:2 with points pt 7 ps 1.6 lc rgb '#17becf' title 'mutwo sweep-50 (2965 MiB, 43.8 ms)'
set terminal pngcairo size 1400,650 background rgb 'white'
set output 'pareto_resnet-152_32.png'
set title 'resnet-152, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_resnet-152_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (6009 MiB, 42.5 ms)', 'pareto_resnet-152_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (2569 MiB, 107.6 ms)', 'pareto_resnet-152_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (5972 MiB, 39.4 ms)', 'pareto_resnet-152_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (5972 MiB, 36.3 ms)', 'pareto_resnet-152_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (2530 MiB, 43.1 ms)', 'pareto_resnet-152_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (2527 MiB, 41.6 ms)', 'pareto_resnet-152_32.dat' index 6 using 3:2 with points pt 7 ps 1.6 lc rgb '#e377c2' title 'mutwo sweep-90 (5338 MiB, 39.6 ms)', 'pareto_resnet-152_32.dat' index 7 using 3:2 with points pt 7 ps 1.6 lc rgb '#7f7f7f' title 'mutwo sweep-75 (4444 MiB, 40.8 ms)', 'pareto_resnet-152_32.dat' index 8 using 3:2 with points pt 7 ps 1.6 lc rgb '#bcbd22' title 'mutwo sweep-60 (3554 MiB, 42.3 ms)', 'pareto_resnet-152_32.dat' index 9 using 3:2 with points pt 7 ps 1.6 lc rgb '#17becf' title 'mutwo sweep-50 (2965 MiB, 43.8 ms)'
